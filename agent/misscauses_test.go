package agent

import (
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"slices"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/misswatch"
)

// TestMissCauses: an interval's misses are split by the samples the
// watcher took, the rest unexplained, and the cumulative causes always add
// up to the kernel's recursion_misses.
func TestMissCauses(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	sample := func(cause string) MissSample { return MissSample{ProgID: 7, Cause: cause, Context: ContextTask} }
	for _, tc := range []struct {
		name    string
		watcher bool
		pending []MissSample
		prev    *MissCauses
		total   uint64
		misses  uint64
		delta   MissCauses
		cum     *MissCauses
	}{
		{name: "no watcher", total: 15, misses: 5, delta: MissCauses{Unexplained: 5}},
		{name: "watched, nothing sampled", watcher: true, total: 15, misses: 5, delta: MissCauses{Unexplained: 5}},
		{name: "three of five sampled, ten missed before", watcher: true, pending: []MissSample{sample(CauseRecursion), sample(CauseRecursion), sample(CauseInterrupt)},
			total: 15, misses: 5, delta: MissCauses{Recursion: 2, Interrupt: 1, Unexplained: 2}, cum: &MissCauses{Recursion: 2, Interrupt: 1, Unexplained: 12}},
		{name: "more samples than misses (a re-trapping CPU)", watcher: true, pending: []MissSample{sample(CausePreempted), sample(CausePreempted), sample(CausePreempted)},
			total: 2, misses: 2, delta: MissCauses{Preempted: 2}, cum: &MissCauses{Preempted: 2}},
		{name: "carried and added", watcher: true, pending: []MissSample{sample(CauseNested)}, prev: &MissCauses{Recursion: 4, Unexplained: 1},
			total: 8, misses: 3, delta: MissCauses{Nested: 1, Unexplained: 2}, cum: &MissCauses{Recursion: 4, Nested: 1, Unexplained: 3}},
		{name: "no misses: carried as it was", watcher: true, prev: &MissCauses{Recursion: 4}, total: 4, misses: 0, cum: &MissCauses{Recursion: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{}
			if tc.watcher {
				a.mw = &missWatch{credit: misses.NewCredit(), spent: map[uint32]bool{}}
				a.mw.credit.Begin(time.Time{}, time.Time{})
				for _, s := range tc.pending {
					a.mw.credit.Add(s)
				}
			}
			e := &ProgramStat{Program: Program{ID: 7, RecursionMisses: u(tc.total)}}
			old := &ProgramStat{Program: Program{ID: 7}, MissCauses: tc.prev}
			a.missCauses(e, old, tc.misses)
			if e.DeltaCauses != tc.delta {
				t.Errorf("delta %+v, want %+v", e.DeltaCauses, tc.delta)
			}
			switch {
			case tc.cum == nil && e.MissCauses != nil:
				t.Errorf("cumulative %+v, want nil (nothing explained)", *e.MissCauses)
			case tc.cum != nil && (e.MissCauses == nil || *e.MissCauses != *tc.cum):
				t.Errorf("cumulative %v, want %+v", e.MissCauses, *tc.cum)
			case e.MissCauses != nil && e.MissCauses.Sum() != tc.total:
				t.Errorf("causes add up to %d, the kernel counted %d", e.MissCauses.Sum(), tc.total)
			}
			if a.mw != nil {
				if _, left := a.mw.credit.Take(7, 100); len(left) != 0 {
					t.Errorf("%d samples left pending after the interval", len(left))
				}
			}
		})
	}
}

// TestWatcherNamesAgentCauses: the watcher (a leaf probe, which cannot
// import the agent) names causes and contexts with the agent's words; a
// name the agent does not know would count its misses as unexplained.
func TestWatcherNamesAgentCauses(t *testing.T) {
	for _, c := range []string{misswatch.CauseRecursion, misswatch.CauseInterrupt, misswatch.CausePreempted, misswatch.CauseNested} {
		if !slices.Contains(Causes[:], c) || c == CauseUnexplained {
			t.Errorf("the watcher's cause %q is not an explained agent cause", c)
		}
	}
	for w, a := range map[string]string{misswatch.ContextTask: ContextTask, misswatch.ContextSoftirq: ContextSoftirq, misswatch.ContextHardirq: ContextHardirq, misswatch.ContextNMI: ContextNMI} {
		if w != a {
			t.Errorf("the watcher's context %q, the agent's %q", w, a)
		}
	}
}

// TestBlindProgram: a watched program whose misses give no sample, budget
// unspent, for blindIntervals intervals and blindMisses misses is blind;
// one sample or a spent budget starts the count again.
func TestBlindProgram(t *testing.T) {
	type interval struct {
		misses, samples uint64
		spent           bool
	}
	for _, tc := range []struct {
		name      string
		intervals []interval
		blind     bool
	}{
		{"two dry intervals, 6 misses", []interval{{3, 0, false}, {3, 0, false}}, true},
		{"one dry interval, many misses", []interval{{100, 0, false}}, false},
		{"two dry intervals, 5 misses", []interval{{3, 0, false}, {2, 0, false}}, false},
		{"three dry intervals, 6 misses", []interval{{3, 0, false}, {2, 0, false}, {1, 0, false}}, true},
		{"a sample breaks the run", []interval{{3, 0, false}, {3, 1, false}, {3, 0, false}}, false},
		{"a spent budget breaks the run", []interval{{3, 0, false}, {3, 0, true}, {3, 0, false}}, false},
		{"sampled every time", []interval{{3, 3, false}, {3, 3, false}, {3, 3, false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &missWatch{watched: map[uint32]*watchedProg{7: {name: "k"}}, credit: misses.NewCredit(),
				spent: map[uint32]bool{}, blind: map[uint32]BlindProgram{}, slots: misses.NewSlots()}
			for _, iv := range tc.intervals {
				clear(m.spent)
				m.spent[7] = iv.spent
				m.credit.Begin(time.Time{}, time.Time{})
				for range iv.samples {
					m.credit.Add(MissSample{ProgID: 7, Cause: CauseNested})
				}
				m.explain(7, iv.misses)
			}
			if _, blind := m.blind[7]; blind != tc.blind {
				t.Errorf("blind %v, want %v (%+v)", blind, tc.blind, m.watched[7])
			}
			if got := m.state().Blind; tc.blind && (len(got) != 1 || got[0].ProgID != 7 || got[0].ProgName != "k") {
				t.Errorf("state's blind programs %+v, want k #7", got)
			}
		})
	}
}
