package misses

import (
	"slices"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// Credit matches sampled misses to the intervals whose reads of the
// counters counted them, so that each interval's causes add up to the
// kernel's count and a miss shown with its cause is never also counted
// unexplained. A scan reads the counters from cut to end, then drains the
// samples: one taken before the read is of this interval, one after it of
// the next, one during it of this interval while its count has room (the
// read of its CPU's counter may have come before or after it); one from
// before the previous read began belongs to an interval already counted
// and is dropped (Late).
type Credit struct {
	// pending holds each program's samples for this scan's counts,
	// carry those for the next scan's.
	pending, carry map[uint32][]MissSample
	cut, end, prev time.Time
	recent         []MissSample
	// Late counts the samples dropped for coming after their interval
	// was counted.
	Late uint64
}

// NewCredit starts with nothing pooled.
func NewCredit() *Credit {
	return &Credit{pending: map[uint32][]MissSample{}, carry: map[uint32][]MissSample{}}
}

// Begin starts a scan whose read of the counters ran from cut to end.
func (c *Credit) Begin(cut, end time.Time) {
	c.recent = c.recent[:0]
	// The last scan's leftovers after its cut start this scan's pools
	// (Take carried those of programs it saw; the pools of programs
	// whose read counted nothing are carried here); the rest were of
	// misses an earlier read counted.
	for id, pool := range c.pending {
		for _, s := range pool {
			if !c.cut.IsZero() && !s.Time.Before(c.cut) {
				c.carry[id] = append(c.carry[id], s)
			}
		}
	}
	clear(c.pending)
	c.pending, c.carry = c.carry, c.pending
	c.prev, c.cut, c.end = c.cut, cut, end
}

// Add pools a sample drained in this scan.
func (c *Credit) Add(s MissSample) {
	switch {
	case !c.prev.IsZero() && s.Time.Before(c.prev):
		c.Late++
	case !c.end.IsZero() && s.Time.After(c.end):
		c.carry[s.ProgID] = append(c.carry[s.ProgID], s)
	default:
		c.pending[s.ProgID] = append(c.pending[s.ProgID], s)
	}
}

// Take splits the misses this scan's read counted for program id by
// cause: one per pooled sample, oldest first, the rest unexplained; it
// returns the samples it credited. Samples beyond the count are of misses
// after the read (kept for the next scan when they came after its cut)
// or of writes a CPU re-trapped (qemu's arm64 does), dropped: counts come
// from the kernel, causes from the samples.
func (c *Credit) Take(id uint32, misses uint64) (prog.MissCauses, []MissSample) {
	var causes prog.MissCauses
	pool := c.pending[id]
	slices.SortStableFunc(pool, func(a, b MissSample) int { return a.Time.Compare(b.Time) })
	n := min(uint64(len(pool)), misses)
	for _, s := range pool[:n] {
		causes.Add(s.Cause, 1)
	}
	causes.Unexplained = misses - n
	for _, s := range pool[n:] {
		if !c.cut.IsZero() && !s.Time.Before(c.cut) {
			c.carry[id] = append(c.carry[id], s)
		}
	}
	for _, s := range pool[:n] {
		if len(c.recent) == MaxMissSamples {
			copy(c.recent, c.recent[1:])
			c.recent = c.recent[:MaxMissSamples-1]
		}
		c.recent = append(c.recent, s)
	}
	delete(c.pending, id)
	return causes, pool[:n]
}

// Recent are the samples this scan credited (at most MaxMissSamples).
func (c *Credit) Recent() []MissSample { return append([]MissSample(nil), c.recent...) }
