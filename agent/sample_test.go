package agent

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestProgramDelta(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prevScan := t0.Add(-time.Second)
	cases := []struct {
		name     string
		cur      counters
		prev     counters
		havePrev bool
		loaded   time.Time
		prevScan time.Time
		want     Rates
	}{
		{"growth", counters{runs: 150, runTime: 3000, misses: 7, linkMissed: 2}, counters{runs: 100, runTime: 1000, misses: 5}, true, t0.Add(-time.Hour), prevScan,
			Rates{Runs: 50, RunTimeNs: 2000, Misses: 2, LinkMissed: 2}},
		{"no change (stats switched off by someone else)", counters{runs: 100, runTime: 1000}, counters{runs: 100, runTime: 1000}, true, t0, prevScan, Rates{}},
		{"smaller value is no growth", counters{runs: 10, linkMissed: 1}, counters{runs: 100, linkMissed: 9}, true, t0, prevScan, Rates{}},
		{"first scan ever", counters{runs: 100, misses: 3}, counters{}, false, t0, time.Time{}, Rates{}},
		{"loaded inside the interval counts whole", counters{runs: 100, runTime: 50, misses: 3}, counters{}, false, prevScan.Add(time.Millisecond), prevScan,
			Rates{Runs: 100, RunTimeNs: 50, Misses: 3}},
		{"loaded exactly at previous scan counts whole", counters{runs: 1}, counters{}, false, prevScan, prevScan, Rates{Runs: 1}},
		{"existed before but unread: no history", counters{runs: 100}, counters{}, false, prevScan.Add(-time.Minute), prevScan, Rates{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := programDelta(c.cur, c.prev, c.havePrev, c.loaded, c.prevScan); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestWithRates(t *testing.T) {
	cases := []struct {
		name string
		d    Rates
		dt   time.Duration
		want Rates
	}{
		{"two seconds", Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4}, 2 * time.Second,
			Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4, RunsPerSec: 500, NsPerRun: 500_000, CPUShare: 0.25, MissesPerSec: 7}},
		{"no runs: ns per run is 0, not NaN", Rates{Misses: 5}, time.Second, Rates{Misses: 5, MissesPerSec: 5}},
		{"first interval has no rates", Rates{Runs: 5}, 0, Rates{Runs: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := withRates(c.d, c.dt)
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			if math.IsNaN(got.NsPerRun) || math.IsInf(got.CPUShare, 0) {
				t.Errorf("non-finite rate %+v", got)
			}
		})
	}
}

func TestAggregateAttachTypes(t *testing.T) {
	m := func(v uint64) *uint64 { return &v }
	progs := []*ProgramStat{
		{Program: Program{ID: 1, AttachType: "fentry", RunCount: 10, RunTimeNs: 100, RecursionMisses: m(1)}, Delta: Rates{Runs: 4, RunTimeNs: 40, Misses: 1}},
		{Program: Program{ID: 2, AttachType: "fentry", RunCount: 20, RunTimeNs: 300, RecursionMisses: m(2)}, Delta: Rates{Runs: 6, RunTimeNs: 60}},
		{Program: Program{ID: 3, AttachType: "kprobe", RunCount: 5, Links: []Link{{Missed: m(9)}, {Missed: m(1)}}}, Delta: Rates{Runs: 5, LinkMissed: 3}},
		{Program: Program{ID: 4, AttachType: Unattached, RecursionMisses: nil}},
	}
	ref := refAttachTypes(progs, time.Second, map[string]float64{"fentry": 12.5})
	ov := 12.5
	got := fromScratch(progs).attachTypes(time.Second, map[string]*float64{"fentry": &ov})
	if !reflect.DeepEqual(got, ref) {
		t.Errorf("aggregates give %+v, the reference %+v", got, ref)
	}
	if len(got) != 3 {
		t.Fatalf("got %d attach types, want 3: %+v", len(got), got)
	}
	f := got[0]
	if f.AttachType != "fentry" || f.Programs != 2 || f.RunCount != 30 || f.RunTimeNs != 400 || f.RecursionMisses != 3 ||
		f.Delta.Runs != 10 || f.Delta.RunTimeNs != 100 || f.Delta.NsPerRun != 10 || f.Delta.Misses != 1 || f.OverheadNs == nil || *f.OverheadNs != 12.5 {
		t.Errorf("fentry = %+v", f)
	}
	k := got[1]
	if k.AttachType != "kprobe" || k.LinkMissed != 10 || k.Delta.LinkMissed != 3 || k.Delta.MissesPerSec != 3 || k.OverheadNs != nil {
		t.Errorf("kprobe = %+v", k)
	}
	if got[2].AttachType != Unattached || got[2].Programs != 1 {
		t.Errorf("unattached = %+v", got[2])
	}
}

func TestAggregateOwners(t *testing.T) {
	progs := []*ProgramStat{
		{Program: Program{ID: 1, RunCount: 10, Owners: []Owner{{PID: 7, Comm: "cilium-agent", ContainerID: "abc"}, {PID: 8, ContainerID: "abc"}}}, Delta: Rates{RunTimeNs: 10}},
		{Program: Program{ID: 2, RunCount: 5, Owners: []Owner{{PID: 9, Comm: "bpftrace"}}}, Delta: Rates{RunTimeNs: 50}},
		{Program: Program{ID: 3, RunCount: 1, Owners: []Owner{{PID: 7, ContainerID: "abc"}}}, Delta: Rates{RunTimeNs: 5}},
		{Program: Program{ID: 4}},
	}
	got := fromScratch(progs).owners(progs, time.Second)
	if ref := refOwners(progs, time.Second); !reflect.DeepEqual(got, ref) {
		t.Errorf("aggregates give %+v, the reference %+v", got, ref)
	}
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	if got[0].Key != "pid:9" || got[0].Comm != "bpftrace" || got[0].Delta.RunTimeNs != 50 {
		t.Errorf("first owner (most run time) = %+v", got[0])
	}
	c := got[1]
	if c.Key != "abc" || c.RunCount != 11 || len(c.ProgramIDs) != 2 || c.Delta.RunTimeNs != 15 {
		t.Errorf("container owner (two pids, one count per program) = %+v", c)
	}
}
