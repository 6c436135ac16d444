package agent

import (
	"testing"
	"time"
)

type epStep struct {
	misses  map[uint32]uint64 // prog id → misses this interval
	gone    []uint32
	open    []uint32 // prog ids with an open episode after the step
	closed  map[uint32]string
	checkFn func(t *testing.T, eps []Episode)
}

func runEpisodeSteps(t *testing.T, quiet int, steps []epStep) *episodeTracker {
	t.Helper()
	tr := newEpisodeTracker(quiet)
	now := time.Unix(1_000_000, 0)
	for i, s := range steps {
		now = now.Add(time.Second)
		var obs []missObservation
		for id, m := range s.misses {
			obs = append(obs, missObservation{key: episodeKey{SourceRecursionMisses, id, 0}, misses: m, runs: 10 * m, kind: MissKindRecursion, prog: &Program{ID: id, Name: "p"}})
		}
		gone := map[uint32]bool{}
		for _, g := range s.gone {
			gone[g] = true
		}
		eps := tr.observe(now, time.Second, obs, func(k episodeKey) bool { return !gone[k.prog] })
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
	eps := tr.closeAll("shutdown")
	if len(eps) != 1 || eps[0].ProgID != 2 || eps[0].Open || eps[0].Reason != "shutdown" {
		t.Errorf("closeAll = %+v", eps)
	}
	if len(tr.closeAll("shutdown")) != 0 {
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
	tr := newEpisodeTracker(2)
	now := time.Unix(0, 0)
	obs := []missObservation{{key: episodeKey{SourceRecursionMisses, 1, 0}, misses: 1}}
	all := func(episodeKey) bool { return true }
	first := tr.observe(now, time.Second, obs, all)
	tr.observe(now.Add(time.Second), time.Second, obs, all)
	if len(first[0].Intervals) != 1 || first[0].Misses != 1 {
		t.Errorf("an earlier snapshot's episode changed: %+v", first[0])
	}
}
