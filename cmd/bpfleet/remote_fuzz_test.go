package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
)

// FuzzRemoteSnapshot feeds arbitrary bytes to what `top --remote` does
// with an agent's answer: api.DecodeSnapshot, then both renderings, at
// every sort. A hostile or broken agent must yield an error or a screen,
// never a panic; a decoded snapshot must survive a JSON round trip.
func FuzzRemoteSnapshot(f *testing.F) {
	miss := uint64(25)
	seed := &agent.Snapshot{
		Seq: 7, Time: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Interval: 10 * time.Second,
		Kernel: agent.KernelInfo{Release: "6.18.0", Arch: "x86_64", CPUs: 2},
		Programs: []*agent.ProgramStat{{
			Program: agent.Program{ID: 20, Name: "canary", Type: "tracing", AttachType: "tp_btf", RecursionMisses: &miss,
				Links: []agent.Link{{ID: 5, ProgID: 20, Missed: &miss}}, Owners: []agent.Owner{{PID: 1, Comm: "x", PodName: "p"}}},
			Delta: agent.Rates{Runs: 5000, CPUShare: 0.2, NsPerRun: 40},
		}},
		AttachTypes: []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: 1}},
		Episodes:    []agent.Episode{{ProgID: 20, Open: true, Misses: 25}},
	}
	b, _ := json.Marshal(seed)
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"programs":[{"id":1,"links":[null],"owners":[{}]},null],"attach_types":null}`))
	f.Add([]byte(`{"programs":[{"delta":{"cpu_share":-1e308}}],"interval_ns":-1}`))
	f.Add([]byte(`{"time":"not a time"}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte(`{"programs":[{"name":"\u0000\u001b[2J","recursion_misses":18446744073709551615}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := api.DecodeSnapshot(bytes.NewReader(data), "fuzz")
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		for _, sort := range []string{"cpu", "runs", "misses", "nsrun", "id", "name"} {
			v := newTopView()
			if err := v.setSort(sort); err != nil {
				t.Fatal(err)
			}
			v.renderPlain(io.Discard, s)
			_ = v.renderScreen(s, 24, 80)
			_ = v.renderScreen(s, 1, 1)
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("re-encoding a decoded snapshot: %v", err)
		}
		if _, err := api.DecodeSnapshot(bytes.NewReader(again), "fuzz"); err != nil {
			t.Fatalf("a re-encoded snapshot does not decode: %v", err)
		}
	})
}
