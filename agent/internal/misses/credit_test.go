package misses

import (
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// TestCredit: a sample is credited to the interval whose read
// counted its miss, and only credited samples are shown, so no miss is
// both shown with a cause and counted unexplained. A miss during a
// scan's read (cut to end) may be counted by it or by the next read; one
// after the read is the next read's; one drained after its interval was
// counted is dropped. A sample beyond the count from before the read (a
// re-trapped write) is dropped too.
func TestCredit(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration, cause string) MissSample {
		return MissSample{ProgID: 7, Cause: cause, Context: ContextTask, Time: t0.Add(d)}
	}
	const ms = time.Millisecond
	c := NewCredit()
	for i, iv := range []struct {
		cut     time.Duration // the read ran from cut to cut+100ms
		samples []MissSample
		misses  uint64
		want    prog.MissCauses
		shown   int
	}{
		// Read at t0: two misses before it, one sampled during the read
		// and one after it; the read counted those three and one not
		// sampled (the one after it is not that one).
		{0, []MissSample{at(2*ms, prog.CauseRecursion), at(-time.Second, prog.CauseRecursion), at(-2*time.Second, prog.CauseInterrupt), at(150*ms, prog.CauseNested)},
			4, prog.MissCauses{Recursion: 2, Interrupt: 1, Unexplained: 1}, 3},
		// The next read counts the one after it, its sample carried.
		{10 * time.Second, nil, 1, prog.MissCauses{Nested: 1}, 1},
		// One sampled during the read that the read did not count (its
		// CPU's counter read before it): nothing shown, nothing counted...
		{20 * time.Second, []MissSample{at(20*time.Second+50*ms, prog.CausePreempted)}, 0, prog.MissCauses{}, 0},
		// ...and the next read counts it, with its sample.
		{30 * time.Second, nil, 1, prog.MissCauses{Preempted: 1}, 1},
		// Two samples of one counted miss before the read: one dropped...
		{40 * time.Second, []MissSample{at(35*time.Second, prog.CausePreempted), at(36*time.Second, prog.CausePreempted)}, 1, prog.MissCauses{Preempted: 1}, 1},
		// ...and not taken for the next interval's unsampled miss; nor
		// is a sample drained late, of a miss the last read counted.
		{50 * time.Second, []MissSample{at(39*time.Second, prog.CauseRecursion)}, 1, prog.MissCauses{Unexplained: 1}, 0},
	} {
		c.Begin(t0.Add(iv.cut), t0.Add(iv.cut+100*ms))
		for _, s := range iv.samples {
			c.Add(s)
		}
		var got prog.MissCauses
		if iv.misses > 0 { // as the agent: an interval without misses is not explained
			got, _ = c.Take(7, iv.misses)
		}
		if got != iv.want {
			t.Errorf("interval %d: causes %+v, want %+v", i, got, iv.want)
		}
		if len(c.Recent()) != iv.shown {
			t.Errorf("interval %d: %d samples shown, want %d (those its causes count)", i, len(c.Recent()), iv.shown)
		}
	}
	if c.Late != 1 {
		t.Errorf("%d samples dropped late, want 1", c.Late)
	}
}
