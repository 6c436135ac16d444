package main

import (
	"bytes"
	"encoding/json"
	"io"
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
		{ID: 7, Name: "canary", Tag: "5caab914178b6c41", Type: "tracing", AttachType: "tp_btf", AttachTarget: "bpf_trace_printk", TargetClass: "kubepods/<burstable>",
			Sleepable: &no, MissKind: "recursion", LoadTime: time.Date(2026, 12, 2, 13, 59, 26, 1, time.FixedZone("x", 3600)), UID: u32(0),
			MapIDs: []uint32{3, 4}, BTFID: 9, JitedSize: 80, XlatedSize: 96, Memlock: u64(4096), VerifiedInsns: u32(12),
			RunCount: 1<<64 - 1, RunTimeNs: 5, RecursionMisses: u64(7),
			Links:  []agent.Link{{ID: 1, ProgID: 7, Type: "raw_tracepoint", AttachType: "tp_btf", Target: "x", TargetClass: "y", Missed: u64(2)}},
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
	// The watcher explained some of canary's misses: miss_causes appears.
	snap.Programs[1].MissCauses = &agent.MissCauses{Recursion: 4, Preempted: 1, Unexplained: 2}
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

// TestLoadTimes: load times written with the last second's date, clock and
// zone kept are what time.Time.MarshalJSON writes, in one sequence that
// stays in a second (fractions with and without trailing zeros, none),
// moves to the next, changes location within the same second, and crosses
// a DST change of the local zone; a year JSON cannot hold is an error.
func TestLoadTimes(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		berlin = time.FixedZone("CET", 3600)
	}
	base := time.Date(2026, 3, 29, 0, 59, 59, 0, time.UTC) // 02:00 CET becomes 03:00 CEST at 01:00 UTC
	var times []time.Time
	for _, ns := range []int{0, 1, 120000000, 999999999, 5, 0} {
		times = append(times, base.Add(time.Duration(ns)))
	}
	for _, tm := range append([]time.Time(nil), times...) {
		times = append(times, tm.In(berlin), tm.Add(time.Second).In(berlin), tm.In(time.FixedZone("", -(7*3600+30*60))), tm.Local())
	}
	times = append(times, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Now(), time.Now().Add(42)) // a zero time too
	var lt loadTimes
	for _, tm := range times {
		want, err := tm.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := lt.append(nil, tm)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%v: got %s (%v), want %s", tm, got, err, want)
		}
	}
	if _, err := lt.append(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("year 10000: no error")
	}
}

// BenchmarkWriteListJSON: the hand encoder over 1,000 programs like the
// bench's (`make bench BENCH=list`): loaded within a few seconds, no links.
func BenchmarkWriteListJSON(b *testing.B) {
	u32 := func(v uint32) *uint32 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	no := false
	snap := &agent.Snapshot{Time: time.Now(), Kernel: agent.KernelInfo{Release: "6.18"}}
	loaded := time.Now().Add(-time.Hour)
	for i := range 1000 {
		snap.Programs = append(snap.Programs, &agent.ProgramStat{Program: agent.Program{ID: uint32(4514542 + i), Name: "list_test",
			Tag: "5caab914178b6c41", Type: "socket_filter", AttachType: "unattached", Sleepable: &no, MissKind: "none",
			LoadTime: loaded.Add(time.Duration(i) * 123457 * time.Nanosecond), UID: u32(0), MapIDs: []uint32{}, JitedSize: 80,
			XlatedSize: 96, Memlock: u64(4096), VerifiedInsns: u32(2), RecursionMisses: u64(0)}})
	}
	for b.Loop() {
		if err := writeListJSON(io.Discard, snap); err != nil {
			b.Fatal(err)
		}
	}
}
