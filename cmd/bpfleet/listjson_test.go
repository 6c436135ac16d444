package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// TestListJSONMatchesEncodingJSON: the hand encoder writes exactly what
// encoding/json writes for the same value, edge cases included.
func TestListJSONMatchesEncodingJSON(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	yes, no := true, false
	progs := []agent.Program{
		{},
		{ID: 7, Name: "canary", Tag: "5caab914178b6c41", Type: "tracing", AttachType: "tp_btf", AttachTarget: "bpf_trace_printk",
			Sleepable: &no, MissKind: "recursion", LoadTime: time.Date(2026, 12, 2, 13, 59, 26, 1, time.FixedZone("x", 3600)), UID: u32(0),
			MapIDs: []uint32{3, 4}, BTFID: 9, JitedSize: 80, XlatedSize: 96, Memlock: u64(4096), VerifiedInsns: u32(12),
			RunCount: 1<<64 - 1, RunTimeNs: 5, RecursionMisses: u64(7),
			Links:  []agent.Link{{ID: 1, ProgID: 7, Type: "raw_tracepoint", AttachType: "tp_btf", Target: "x", Missed: u64(2)}},
			Owners: []agent.Owner{{PID: 3, Comm: "a\"<b>&\x01é", Via: "fd"}}, Pins: []string{"/sys/fs/bpf/x"}},
		{Name: "ünï\u2028code<&>", Sleepable: &yes, MapIDs: []uint32{}, Links: []agent.Link{}, Owners: []agent.Owner{}, Pins: []string{}},
	}
	snap := &agent.Snapshot{
		Time:        time.Date(2026, 12, 2, 13, 59, 26, 790902982, time.UTC),
		Kernel:      agent.KernelInfo{Release: "6.18", Preempt: "PREEMPT_DYNAMIC"},
		Stats:       agent.StatsState{Enabled: true, Sysctl: -1},
		AttachTypes: []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: 1}},
		Scan:        agent.ScanStats{Programs: 3, ErrorMsgs: []string{"x"}, Source: agent.ScanSourceSyscall, FallbackReason: "kernel lacks \"x\" <&>"},
	}
	for _, p := range progs {
		snap.Programs = append(snap.Programs, &agent.ProgramStat{Program: p, Delta: agent.Rates{Runs: 3}, New: true})
	}
	var got, want bytes.Buffer
	if err := writeListJSON(&got, snap); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(&want).Encode(newListOutput(snap, false)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("hand encoder differs:\n got %s\nwant %s", got.Bytes(), want.Bytes())
	}
	// Enough programs that the document is written in several chunks.
	for i := 0; len(snap.Programs) < 400; i++ {
		snap.Programs = append(snap.Programs, snap.Programs[i%3])
	}
	got.Reset()
	want.Reset()
	writeListJSON(&got, snap)
	json.NewEncoder(&want).Encode(newListOutput(snap, false))
	if got.Len() < 64<<10 || !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("400 programs (%d bytes): hand encoder differs", got.Len())
	}
	snap.Programs = nil
	got.Reset()
	want.Reset()
	writeListJSON(&got, snap)
	json.NewEncoder(&want).Encode(newListOutput(snap, false))
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Errorf("nil programs:\n got %s\nwant %s", got.Bytes(), want.Bytes())
	}
}
