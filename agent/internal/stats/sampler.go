package stats

import (
	"math"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// Sampler turns sampled mode's kernel counts into estimates that only
// grow. Per program, runs (and run time) over at least half a window of
// counted time (the agent's windows, and any time another holder kept
// stats on: the scan's coverage says how long), divided by that time, is
// the rate; an interval gets rate × its length, and never less than the
// kernel counted in it. An interval in which the kernel counted every run
// (another holder throughout) gets the kernel's count, exact, on top of
// the estimate so far; one in which a holder came or went is no
// measurement (the holder's share of it is unknown) and gets the last
// rate. Misses are never scaled: the kernel counts them with stats off.
//
// A program's first scan is its baseline, unless it was loaded since the
// previous scan: then its interval runs from its load. While a program has
// no rate yet it gets what the kernel counted, and the time is owed: the
// first rate measured pays it back, so the program is counted from its
// baseline (or its load) however late the first measurement closes.
type Sampler struct {
	window   time.Duration
	prevScan time.Time
	cov      coverage
	interval statsSpan    // the whole interval's
	Buf      []statsEvent // the events buffer Ctl.Coverage fills, reused
	ps       map[uint32]*sampled
}

type sampled struct {
	est                  prog.Counters // runs and runTime: the estimate handed out
	rated                bool          // runsPerSec and nsPerSec are measured
	runsPerSec, nsPerSec float64       // per second
	pendingOn            time.Duration
	pendingRuns, pendNs  uint64
	// owed is time whose runs got only the kernel's count because no rate
	// was known yet; owedRuns and owedNs what they got.
	owed             time.Duration
	owedRuns, owedNs uint64
}

// NewSampler returns a sampler for windows of the given length, with no
// program seen yet.
func NewSampler(window time.Duration) *Sampler {
	return &Sampler{window: window, ps: map[uint32]*sampled{}}
}

// Begin takes the coverage of the interval since the previous scan
// (Ctl.Coverage, into the sampler's Buf) and returns what its counts
// are: exact when the kernel counted every run of it.
func (s *Sampler) Begin(cov coverage, prevScan time.Time) string {
	s.cov = cov
	s.Buf = cov.events
	s.prevScan = prevScan
	s.interval = s.cov.span(s.cov.from, s.cov.to)
	if s.interval.exact() {
		return CountsExact
	}
	return CountsSampled
}

// Program replaces p's run counters and the interval delta d by their
// estimates.
func (s *Sampler) Program(p *prog.Program, d prog.Rates, dt time.Duration) prog.Rates {
	st, ok := s.ps[p.ID]
	if !ok {
		st = &sampled{}
		s.ps[p.ID] = st
		if s.prevScan.IsZero() || p.LoadTime.Before(s.prevScan) {
			// The baseline: the kernel's count so far (runs before the
			// agent, or while another holder kept stats on) is history.
			st.est = prog.Counters{Runs: p.RunCount, RunTime: p.RunTimeNs}
			d.Runs, d.RunTimeNs = 0, 0
			return d
		}
		// Loaded in this interval: it counted from zero at its load.
		from := p.LoadTime
		if from.Before(s.cov.from) {
			from = s.cov.from
		}
		d.Runs, d.RunTimeNs = s.step(st, s.cov.span(from, s.cov.to), s.cov.to.Sub(from), d.Runs, d.RunTimeNs)
	} else {
		d.Runs, d.RunTimeNs = s.step(st, s.interval, dt, d.Runs, d.RunTimeNs)
	}
	st.est.Runs += d.Runs
	st.est.RunTime += d.RunTimeNs
	p.RunCount, p.RunTimeNs = st.est.Runs, st.est.RunTime
	return d
}

// step is one program's growth over a stretch of wall time whose kernel
// counts grew by runs and ns.
func (s *Sampler) step(st *sampled, sp statsSpan, wall time.Duration, runs, ns uint64) (uint64, uint64) {
	switch {
	case sp.known() && (sp.counted() > 0 || runs == 0):
		st.pendingOn += sp.counted()
		st.pendingRuns += runs
		st.pendNs += ns
	default:
		// A holder came or went (or counted runs no look saw): how long
		// the kernel counted is unknown, so this is no measurement.
		st.pendingOn, st.pendingRuns, st.pendNs = 0, 0, 0
	}
	if st.pendingOn >= s.window/2 {
		sec := st.pendingOn.Seconds()
		st.runsPerSec, st.nsPerSec = float64(st.pendingRuns)/sec, float64(st.pendNs)/sec
		st.pendingOn, st.pendingRuns, st.pendNs = 0, 0, 0
		st.rated = true
	}
	var gotRuns, gotNs uint64
	switch {
	case sp.exact():
		gotRuns, gotNs = runs, ns
	case st.rated:
		gotRuns = max(scaled(st.runsPerSec, wall), runs)
		gotNs = max(scaled(st.nsPerSec, wall), ns)
	default:
		gotRuns, gotNs = runs, ns
		st.owed += wall
		st.owedRuns += runs
		st.owedNs += ns
	}
	if st.rated && st.owed > 0 {
		gotRuns += prog.Sub(scaled(st.runsPerSec, st.owed), st.owedRuns)
		gotNs += prog.Sub(scaled(st.nsPerSec, st.owed), st.owedNs)
		st.owed, st.owedRuns, st.owedNs = 0, 0, 0
	}
	return gotRuns, gotNs
}

// scaled is rate × d, rounded.
func scaled(rate float64, d time.Duration) uint64 {
	return uint64(math.Round(rate * d.Seconds()))
}

// End forgets vanished programs.
func (s *Sampler) End(present func(uint32) bool) {
	for id := range s.ps {
		if !present(id) {
			delete(s.ps, id)
		}
	}
}
