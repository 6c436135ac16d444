package agent

import (
	"strconv"
	"time"
)

// counters are a program's cumulative counters at one scan.
type counters struct {
	runs, runTime, misses, linkMissed uint64
}

func progCounters(p *Program) counters {
	c := counters{runs: p.RunCount, runTime: p.RunTimeNs}
	if p.RecursionMisses != nil {
		c.misses = *p.RecursionMisses
	}
	for _, l := range p.Links {
		if l.Missed != nil {
			c.linkMissed += *l.Missed
		}
	}
	return c
}

// sub is cur - prev per counter. Kernel counters only grow for a given
// program id; a smaller value (a link detached, so its missed count left
// the sum) counts as no growth rather than a huge wrap-around.
func sub(cur, prev uint64) uint64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// programDelta is one program's interval delta. A program seen for the
// first time contributes its whole counters when it was loaded after the
// previous scan (everything it did happened inside this interval), and
// nothing otherwise (it was there before but unread: its history is not
// this interval's).
func programDelta(cur counters, prev counters, havePrev bool, loaded, prevScan time.Time) Rates {
	switch {
	case havePrev:
		return Rates{
			Runs:       sub(cur.runs, prev.runs),
			RunTimeNs:  sub(cur.runTime, prev.runTime),
			Misses:     sub(cur.misses, prev.misses),
			LinkMissed: sub(cur.linkMissed, prev.linkMissed),
		}
	case !prevScan.IsZero() && !loaded.Before(prevScan):
		return Rates{Runs: cur.runs, RunTimeNs: cur.runTime, Misses: cur.misses, LinkMissed: cur.linkMissed}
	default:
		return Rates{}
	}
}

// withRates fills the derived rates of a delta over interval dt.
func withRates(d Rates, dt time.Duration) Rates {
	if dt <= 0 {
		return Rates{Runs: d.Runs, RunTimeNs: d.RunTimeNs, Misses: d.Misses, LinkMissed: d.LinkMissed}
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

func addRates(a *Rates, b Rates) {
	a.Runs += b.Runs
	a.RunTimeNs += b.RunTimeNs
	a.Misses += b.Misses
	a.LinkMissed += b.LinkMissed
}

// ownerKey groups by container when the owner is in one, else by process.
func ownerKey(o *Owner) string {
	if o.ContainerID != "" {
		return o.ContainerID
	}
	return "pid:" + strconv.Itoa(o.PID)
}
