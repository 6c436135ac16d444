package prog

import (
	"time"
)

// Counters are a program's cumulative counters at one scan.
type Counters struct {
	Runs, RunTime, Misses, LinkMissed uint64
	// LinkMissedBy is LinkMissed by reason (each link's split, unknown
	// where it has none).
	LinkMissedBy LinkMisses
}

// CountersOf reads p's counters, its links' missed counters summed.
func CountersOf(p *Program) Counters {
	c := Counters{Runs: p.RunCount, RunTime: p.RunTimeNs}
	if p.RecursionMisses != nil {
		c.Misses = *p.RecursionMisses
	}
	for i := range p.Links {
		if m, ok := LinkMissedOf(&p.Links[i]); ok {
			c.LinkMissed += *p.Links[i].Missed
			c.LinkMissedBy.Add(m)
		}
	}
	return c
}

// Sub is cur - prev per counter. Kernel counters only grow for a given
// program id; a smaller value (a link detached, so its missed count left
// the sum) counts as no growth rather than a huge wrap-around.
func Sub(cur, prev uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// ProgramDelta is one program's interval delta. A program seen for the
// first time contributes its whole counters when it was loaded after the
// previous scan (everything it did happened inside this interval), and
// nothing otherwise (it was there before but unread: its history is not
// this interval's).
func ProgramDelta(cur Counters, prev Counters, havePrev bool, loaded, prevScan time.Time) Rates {
	switch {
	case havePrev:
		return Rates{
			Runs:         Sub(cur.Runs, prev.Runs),
			RunTimeNs:    Sub(cur.RunTime, prev.RunTime),
			Misses:       Sub(cur.Misses, prev.Misses),
			LinkMissed:   Sub(cur.LinkMissed, prev.LinkMissed),
			LinkMissedBy: linkMissedDelta(cur, prev),
		}
	case !prevScan.IsZero() && !loaded.Before(prevScan):
		return Rates{Runs: cur.Runs, RunTimeNs: cur.RunTime, Misses: cur.Misses, LinkMissed: cur.LinkMissed, LinkMissedBy: cur.LinkMissedBy}
	default:
		return Rates{}
	}
}

// WithRates fills the derived rates of a delta over interval dt.
func WithRates(d Rates, dt time.Duration) Rates {
	if dt <= 0 {
		return Rates{Runs: d.Runs, RunTimeNs: d.RunTimeNs, Misses: d.Misses, LinkMissed: d.LinkMissed, LinkMissedBy: d.LinkMissedBy}
	}
	sec := dt.Seconds()
	d.RunsPerSec = float64(d.Runs) / sec
	d.MissesPerSec = float64(d.Misses+d.LinkMissed) / sec
	d.CPUShare = float64(d.RunTimeNs) / float64(dt.Nanoseconds())
	d.NsPerRun = 0
	if d.Runs > 0 {
		d.NsPerRun = float64(d.RunTimeNs) / float64(d.Runs)
	}
	return d
}

// AddRates adds b's deltas to a (its rates are derived later).
func AddRates(a *Rates, b Rates) {
	a.Runs += b.Runs
	a.RunTimeNs += b.RunTimeNs
	a.Misses += b.Misses
	a.LinkMissed += b.LinkMissed
	a.LinkMissedBy.Add(b.LinkMissedBy)
}

// linkMissedDelta splits the growth of a program's link missed by the
// growths of its reasons, so that the parts add up to the LinkMissed
// delta even when a link came or went (its counters leave the sums).
func linkMissedDelta(cur, prev Counters) LinkMisses {
	d := Sub(cur.LinkMissed, prev.LinkMissed)
	n := Sub(cur.LinkMissedBy.Nesting, prev.LinkMissedBy.Nesting)
	m := Sub(cur.LinkMissedBy.Maxactive, prev.LinkMissedBy.Maxactive)
	return SplitLinkMissed(d, &n, &m)
}
