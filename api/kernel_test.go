package api

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/canary"
)

// TestServeRealScan loads the recursion canary into the running kernel,
// lets the real agent scan twice around n triggers, serves the snapshot
// over a loopback socket and reads every endpoint back. The canary's misses
// must come back exactly as the kernel counted them.
func TestServeRealScan(t *testing.T) {
	c, err := canary.Load()
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel refuses the canary: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.ProgramID()
	if err != nil {
		t.Fatal(err)
	}

	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	var latest atomic.Pointer[agent.Snapshot]
	first, err := a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	latest.Store(first)

	s := newTestServer(t, Options{Addr: "127.0.0.1:0", Snapshot: latest.Load})
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- s.Serve(sctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + addr.String()

	const n = 40
	if err := c.Trigger(n); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	latest.Store(snap)
	want, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}

	// /v1/programs/{id}: the canary with its cumulative misses and delta.
	var p agent.ProgramStat
	fetchJSON(t, base+"/v1/programs/"+itoa(id), &p)
	if p.ID != id || p.AttachType != "tp_btf" {
		t.Errorf("program %d came back as id %d attach type %q, want tp_btf", id, p.ID, p.AttachType)
	}
	if p.RecursionMisses == nil || *p.RecursionMisses != want {
		t.Errorf("program %d recursion_misses = %v, kernel says %d", id, p.RecursionMisses, want)
	}
	if p.Delta.Misses != n {
		t.Errorf("program %d delta misses = %d, want %d (triggered between the scans)", id, p.Delta.Misses, n)
	}

	// /v1/snapshot through the client `top --remote` uses.
	got, err := FetchSnapshot(ctx, base, "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != snap.Seq || len(got.Programs) != len(snap.Programs) || got.Kernel.Release == "" {
		t.Errorf("FetchSnapshot: seq %d, %d programs, kernel %q; served seq %d, %d programs", got.Seq, len(got.Programs), got.Kernel.Release, snap.Seq, len(snap.Programs))
	}

	// /v1/programs filtered the way an operator would look for it.
	var l ProgramList
	fetchJSON(t, base+"/v1/programs?attach_type=tp_btf&missed=true&name=canary", &l)
	if !hasProgram(l.Programs, id) {
		t.Errorf("/v1/programs?attach_type=tp_btf&missed=true does not list the canary %d", id)
	}
	fetchJSON(t, base+"/v1/programs?missed=false", &l)
	if hasProgram(l.Programs, id) {
		t.Errorf("/v1/programs?missed=false lists the canary %d, which missed %d times", id, want)
	}

	// /v1/episodes: the canary's misses opened an episode.
	var el EpisodeList
	fetchJSON(t, base+"/v1/episodes?prog_id="+itoa(id), &el)
	if len(el.Episodes) != 1 || !el.Episodes[0].Open || el.Episodes[0].Misses != n {
		t.Errorf("episodes of %d: %+v, want one open episode of %d misses", id, el.Episodes, n)
	}

	// /v1/attach-types: tp_btf counts at least the canary's misses.
	var at AttachTypeList
	fetchJSON(t, base+"/v1/attach-types", &at)
	found := false
	for _, s := range at.AttachTypes {
		if s.AttachType == "tp_btf" {
			found = true
			if s.RecursionMisses == nil || *s.RecursionMisses < want || s.Programs < 1 {
				t.Errorf("tp_btf aggregate %+v, want at least 1 program and %d misses", s, want)
			}
		}
	}
	if !found {
		t.Errorf("/v1/attach-types has no tp_btf: %+v", at.AttachTypes)
	}

	var st Status
	fetchJSON(t, base+"/readyz", &st)
	if st.Status != "ready" || st.Seq != snap.Seq {
		t.Errorf("readyz: %+v", st)
	}
	fetchJSON(t, base+"/healthz", &st)
	if st.Status != "ok" {
		t.Errorf("healthz: %+v", st)
	}
	resp, err := http.Get(base + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" {
		t.Errorf("/openapi.yaml: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
