package agent

import (
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
				a.mw = &missWatch{pending: map[uint32][]MissSample{7: tc.pending}, spent: map[uint32]bool{}}
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
			if a.mw != nil && len(a.mw.pending[7]) != 0 {
				t.Error("samples left pending after the interval")
			}
		})
	}
}

// TestMissSampleCarried: a sample is credited to the interval whose read
// counted its miss, and only credited samples are shown, so no miss is
// both shown with a cause and counted unexplained. A miss during a
// scan's read (cut to end) may be counted by it or by the next read; one
// after the read is the next read's; one drained after its interval was
// counted is dropped. A sample beyond the count from before the read (a
// re-trapped write) is dropped too.
func TestMissSampleCarried(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration, cause string) MissSample {
		return MissSample{ProgID: 7, Cause: cause, Context: ContextTask, Time: t0.Add(d)}
	}
	const ms = time.Millisecond
	m := &missWatch{pending: map[uint32][]MissSample{}, carry: map[uint32][]MissSample{}, spent: map[uint32]bool{}}
	for i, iv := range []struct {
		cut     time.Duration // the read ran from cut to cut+100ms
		samples []MissSample
		misses  uint64
		want    MissCauses
		shown   int
	}{
		// Read at t0: two misses before it, one sampled during the read
		// and one after it; the read counted those three and one not
		// sampled (the one after it is not that one).
		{0, []MissSample{at(2*ms, CauseRecursion), at(-time.Second, CauseRecursion), at(-2*time.Second, CauseInterrupt), at(150*ms, CauseNested)},
			4, MissCauses{Recursion: 2, Interrupt: 1, Unexplained: 1}, 3},
		// The next read counts the one after it, its sample carried.
		{10 * time.Second, nil, 1, MissCauses{Nested: 1}, 1},
		// One sampled during the read that the read did not count (its
		// CPU's counter read before it): nothing shown, nothing counted...
		{20 * time.Second, []MissSample{at(20*time.Second+50*ms, CausePreempted)}, 0, MissCauses{}, 0},
		// ...and the next read counts it, with its sample.
		{30 * time.Second, nil, 1, MissCauses{Preempted: 1}, 1},
		// Two samples of one counted miss before the read: one dropped...
		{40 * time.Second, []MissSample{at(35*time.Second, CausePreempted), at(36*time.Second, CausePreempted)}, 1, MissCauses{Preempted: 1}, 1},
		// ...and not taken for the next interval's unsampled miss; nor
		// is a sample drained late, of a miss the last read counted.
		{50 * time.Second, []MissSample{at(39*time.Second, CauseRecursion)}, 1, MissCauses{Unexplained: 1}, 0},
	} {
		prev := m.cut
		m.drain(nil, t0.Add(iv.cut), t0.Add(iv.cut+100*ms))
		for _, s := range iv.samples {
			m.add(s, prev)
		}
		var got MissCauses
		if iv.misses > 0 { // as the agent: an interval without misses is not explained
			got, _ = m.explain(7, iv.misses)
		}
		if got != iv.want {
			t.Errorf("interval %d: causes %+v, want %+v", i, got, iv.want)
		}
		if len(m.recent) != iv.shown {
			t.Errorf("interval %d: %d samples shown, want %d (those its causes count)", i, len(m.recent), iv.shown)
		}
	}
	if m.late != 1 {
		t.Errorf("%d samples dropped late, want 1", m.late)
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
			m := &missWatch{watched: map[uint32]*watchedProg{7: {name: "k"}}, pending: map[uint32][]MissSample{},
				spent: map[uint32]bool{}, blind: map[uint32]BlindProgram{}}
			for _, iv := range tc.intervals {
				clear(m.spent)
				m.spent[7] = iv.spent
				for range iv.samples {
					m.pending[7] = append(m.pending[7], MissSample{ProgID: 7, Cause: CauseNested})
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
