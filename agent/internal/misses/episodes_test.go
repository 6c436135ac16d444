package misses

import (
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

type epStep struct {
	misses  map[uint32]uint64 // prog id → misses this interval
	gone    []uint32
	open    []uint32 // prog ids with an open episode after the step
	closed  map[uint32]string
	checkFn func(t *testing.T, eps []Episode)
}

func runEpisodeSteps(t *testing.T, quiet int, steps []epStep) *Tracker {
	t.Helper()
	tr := NewTracker(quiet)
	now := time.Unix(1_000_000, 0)
	for i, s := range steps {
		now = now.Add(time.Second)
		var obs []Observation
		for id, m := range s.misses {
			obs = append(obs, Observation{Key: Key{SourceRecursionMisses, id, 0}, Misses: m, Runs: 10 * m, Kind: "recursion", Prog: &prog.Program{ID: id, Name: "p"}})
		}
		gone := map[uint32]bool{}
		for _, g := range s.gone {
			gone[g] = true
		}
		eps := tr.Observe(now, time.Second, obs, func(k Key) bool { return !gone[k.Prog] })
		open, closed := map[uint32]bool{}, map[uint32]string{}
		for _, e := range eps {
			if e.Open {
				open[e.ProgID] = true
			} else {
				closed[e.ProgID] = e.Reason
			}
		}
		if len(open) != len(s.open) {
			t.Errorf("step %d: open = %v, want %v", i, open, s.open)
		}
		for _, id := range s.open {
			if !open[id] {
				t.Errorf("step %d: prog %d not open", i, id)
			}
		}
		if len(closed) != len(s.closed) {
			t.Errorf("step %d: closed = %v, want %v", i, closed, s.closed)
		}
		for id, r := range s.closed {
			if closed[id] != r {
				t.Errorf("step %d: prog %d closed %q, want %q", i, id, closed[id], r)
			}
		}
		if s.checkFn != nil {
			s.checkFn(t, eps)
		}
	}
	return tr
}

func TestEpisodeLifecycle(t *testing.T) {
	runEpisodeSteps(t, 2, []epStep{
		{misses: nil},
		{misses: map[uint32]uint64{1: 3}, open: []uint32{1}},
		{misses: map[uint32]uint64{1: 5, 2: 1}, open: []uint32{1, 2}},
		{misses: map[uint32]uint64{2: 1}, open: []uint32{1, 2}}, // 1 quiet once
		{misses: map[uint32]uint64{1: 2}, open: []uint32{1, 2}}, // 1 resumes, 2 quiet once
		{misses: nil, open: []uint32{1}, closed: map[uint32]string{2: "quiet"},
			checkFn: func(t *testing.T, eps []Episode) {
				for _, e := range eps {
					if e.ProgID == 2 && (e.Misses != 2 || e.Runs != 20 || len(e.Intervals) != 2) {
						t.Errorf("closed episode 2 = %+v", e)
					}
				}
			}},
		{misses: nil, closed: map[uint32]string{1: "quiet"},
			checkFn: func(t *testing.T, eps []Episode) {
				e := eps[0]
				if e.Misses != 10 || e.PeakRate != 5 || len(e.Intervals) != 3 || e.MissRatio() != 10.0/110 {
					t.Errorf("episode 1 = %+v", e)
				}
				if got := e.End.Sub(e.Start); got != 4*time.Second {
					t.Errorf("episode 1 spans %v, want 4s (first interval start to last miss)", got)
				}
			}},
		{misses: nil},
	})
}

func TestEpisodeVanishedAndShutdown(t *testing.T) {
	tr := runEpisodeSteps(t, 3, []epStep{
		{misses: map[uint32]uint64{1: 1, 2: 1}, open: []uint32{1, 2}},
		{misses: nil, gone: []uint32{1}, open: []uint32{2}, closed: map[uint32]string{1: "vanished"}},
	})
	eps := tr.CloseAll("shutdown")
	if len(eps) != 1 || eps[0].ProgID != 2 || eps[0].Open || eps[0].Reason != "shutdown" {
		t.Errorf("closeAll = %+v", eps)
	}
	if len(tr.CloseAll("shutdown")) != 0 {
		t.Error("second closeAll returned episodes")
	}
}

func TestEpisodeIntervalsBounded(t *testing.T) {
	steps := make([]epStep, MaxEpisodeIntervals+10)
	for i := range steps {
		steps[i] = epStep{misses: map[uint32]uint64{1: 1}, open: []uint32{1}}
	}
	last := &steps[len(steps)-1]
	last.checkFn = func(t *testing.T, eps []Episode) {
		e := eps[0]
		if len(e.Intervals) != MaxEpisodeIntervals || e.Truncated != 10 || e.Misses != uint64(len(steps)) {
			t.Errorf("intervals %d truncated %d misses %d", len(e.Intervals), e.Truncated, e.Misses)
		}
	}
	runEpisodeSteps(t, 2, steps)
}

func TestEpisodeSnapshotsDoNotShareState(t *testing.T) {
	tr := NewTracker(2)
	now := time.Unix(0, 0)
	obs := []Observation{{Key: Key{SourceRecursionMisses, 1, 0}, Misses: 1}}
	all := func(Key) bool { return true }
	first := tr.Observe(now, time.Second, obs, all)
	tr.Observe(now.Add(time.Second), time.Second, obs, all)
	if len(first[0].Intervals) != 1 || first[0].Misses != 1 {
		t.Errorf("an earlier snapshot's episode changed: %+v", first[0])
	}
}

// TestEpisodeCauses: an episode adds up its intervals' causes and counts
// its samples by context, task and stack.
func TestEpisodeCauses(t *testing.T) {
	tr := NewTracker(2)
	k := Key{SourceRecursionMisses, 7, 0}
	s1 := MissSample{ProgID: 7, Cause: prog.CauseRecursion, Context: ContextTask, PID: 10, TID: 10, Comm: "a", Stack: []string{"bpf_prog_inc_misses_counter+0x10", "htab_map_delete_elem+0x20"}}
	s2 := MissSample{ProgID: 7, Cause: prog.CauseInterrupt, Context: ContextHardirq, PID: 11, TID: 11, Comm: "b", Stack: []string{"bpf_prog_inc_misses_counter+0x10", "hrtimer_interrupt+0x4"}}
	present := func(Key) bool { return true }
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	eps := tr.Observe(now, 10e9, []Observation{{Key: k, Misses: 3, Causes: prog.MissCauses{Recursion: 2, Unexplained: 1}, Samples: []MissSample{s1, s1}}}, present)
	first := eps[0]
	eps = tr.Observe(now.Add(10e9), 10e9, []Observation{{Key: k, Misses: 2, Causes: prog.MissCauses{Interrupt: 1, Recursion: 1}, Samples: []MissSample{s2, s1}}}, present)
	e := eps[0]
	if want := (prog.MissCauses{Recursion: 3, Interrupt: 1, Unexplained: 1}); e.Causes != want || e.Causes.Sum() != e.Misses {
		t.Errorf("causes %+v (misses %d), want %+v", e.Causes, e.Misses, want)
	}
	if e.Contexts[ContextTask] != 3 || e.Contexts[ContextHardirq] != 1 {
		t.Errorf("contexts %v", e.Contexts)
	}
	if len(e.Tasks) != 2 || e.Tasks[0].PID != 10 || e.Tasks[0].Misses != 3 {
		t.Errorf("tasks %+v", e.Tasks)
	}
	if len(e.Stacks) != 2 || e.Stacks[0].Misses != 3 || e.Stacks[0].Cause != prog.CauseRecursion {
		t.Errorf("stacks %+v", e.Stacks)
	}
	// The first snapshot's episode is not written by the second interval.
	if first.Contexts[ContextHardirq] != 0 || len(first.Tasks) != 1 || first.Tasks[0].Misses != 2 {
		t.Errorf("an earlier snapshot's episode changed: %+v", first)
	}
}
