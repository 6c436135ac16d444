package stats

import (
	"math"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

var t0 = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// The coverage of an interval splits any stretch of it by what the kernel
// did: held by the agent, on or off as the looks on both sides agree,
// unknown between looks that disagree.
func TestCoverageSpan(t *testing.T) {
	open := func(ms int) statsEvent { return statsEvent{t: at(ms), held: true} }
	closed := func(ms int) statsEvent { return statsEvent{t: at(ms)} }
	seen := func(ms int, l look) statsEvent { return statsEvent{t: at(ms), look: l} }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		name   string
		last   look
		held   bool
		events []statsEvent
		a, b   int
		want   statsSpan
	}{
		{name: "a window between looks that say off", last: lookOff,
			events: []statsEvent{seen(100, lookOff), open(100), closed(300), seen(300, lookOff), seen(1000, lookOff)},
			a:      0, b: 1000, want: statsSpan{held: ms(200), off: ms(800)}},
		{name: "another holder throughout", last: lookOn,
			events: []statsEvent{seen(100, lookOn), open(100), closed(300), seen(300, lookOn), seen(1000, lookOn)},
			a:      0, b: 1000, want: statsSpan{held: ms(200), on: ms(800)}},
		{name: "a holder appears between two looks", last: lookOff,
			events: []statsEvent{seen(300, lookOff), seen(500, lookOn), seen(1000, lookOn)},
			a:      0, b: 1000, want: statsSpan{off: ms(300), unknown: ms(200), on: ms(500)}},
		{name: "a holder appears inside the agent's window: no doubt", last: lookOff,
			events: []statsEvent{seen(100, lookOff), open(100), closed(300), seen(300, lookOn), seen(1000, lookOn)},
			a:      0, b: 1000, want: statsSpan{off: ms(100), held: ms(200), on: ms(700)}},
		{name: "a stretch of it: from a load mid-window", last: lookOff,
			events: []statsEvent{seen(100, lookOff), open(100), closed(300), seen(300, lookOff)},
			a:      250, b: 1000, want: statsSpan{held: ms(50), off: ms(700)}},
		{name: "after the last look: as it said", last: lookOff, held: true,
			events: []statsEvent{closed(200), seen(200, lookOn)},
			a:      0, b: 1000, want: statsSpan{held: ms(200), on: ms(800)}},
		{name: "no look yet", events: []statsEvent{open(400), closed(600)},
			a: 0, b: 1000, want: statsSpan{held: ms(200), unknown: ms(800)}},
		{name: "a calibration", last: lookOff,
			events: []statsEvent{seen(200, lookOff), seen(200, lookUnknown), seen(700, lookOff)},
			a:      0, b: 1000, want: statsSpan{unknown: ms(500), off: ms(500)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newStatsLine(at(0))
			l.last, l.held, l.nowLook, l.nowHeld = c.last, c.held, c.last, c.held
			for _, e := range c.events {
				l.add(e)
			}
			cov := l.take(at(1000), nil)
			if got := cov.span(at(c.a), at(c.b)); got != c.want {
				t.Errorf("span = %+v, want %+v", got, c.want)
			}
			// The next take starts from what the events left.
			next := l.take(at(2000), nil)
			if whole := next.span(at(1000), at(2000)); whole.counted()+whole.off+whole.unknown != time.Second {
				t.Errorf("the next interval splits into %+v, not its second", whole)
			}
		})
	}
	l := newStatsLine(at(0))
	for i := range maxStatsEvents + 1 {
		l.add(statsEvent{t: at(i % 1000), look: lookOff})
	}
	if s := l.take(at(1000), nil).span(at(0), at(1000)); s.unknown != time.Second {
		t.Errorf("a record that overflowed: %+v, want all unknown", s)
	}
}

// simNode drives a Sampler through a simulated node: the agent's windows
// of every period, another holder from holdFrom to holdTo, looks where
// Ctl makes them, and one program running at a steady rate from its
// load, whose kernel count grows only while some holder is on.
type simNode struct {
	window, period   time.Duration
	holdFrom, holdTo time.Duration // since t0; equal: no other holder
	rate             float64
	loaded           time.Duration

	line          *statsLine
	smp           *Sampler
	now, nextLook time.Duration
	held          bool
	counted       time.Duration // how long the kernel counted since the load
	prevScan      time.Duration
	prevKernel    uint64
	scanned       bool
}

func newSimNode(window, period time.Duration, rate float64, loaded time.Duration) *simNode {
	return &simNode{window: window, period: period, rate: rate, loaded: loaded,
		line: newStatsLine(t0), smp: NewSampler(window), nextLook: -1}
}

func (n *simNode) other(t time.Duration) bool { return t >= n.holdFrom && t < n.holdTo }

func (n *simNode) look() {
	if n.held {
		return
	}
	l := lookOff
	if n.other(n.now) {
		l = lookOn
	}
	n.line.add(statsEvent{t: t0.Add(n.now), look: l})
}

// until runs the node to t in 1 ms steps.
func (n *simNode) until(t time.Duration) {
	for ; n.now < t; n.now += time.Millisecond {
		switch phase := n.now % n.period; {
		case phase == 0:
			n.look()
			n.held = true
			n.line.add(statsEvent{t: t0.Add(n.now), held: true})
		case phase == n.window:
			n.held = false
			n.line.add(statsEvent{t: t0.Add(n.now)})
			n.look()
			n.nextLook = n.now + lookEvery
		case n.now == n.nextLook:
			n.look()
			n.nextLook += lookEvery
		}
		if n.now >= n.loaded && (n.held || n.other(n.now)) {
			n.counted += time.Millisecond
		}
	}
}

// simScan is one simulated scan of the program.
type simScan struct {
	est, delta, kernelDelta uint64
	truth                   uint64 // runs made since the load
	counts                  string
	dt                      time.Duration
}

// scan scans as Agent.Scan does: a look, the coverage, the program's
// kernel counts through the sampler.
func (n *simNode) scan() (simScan, bool) {
	n.look()
	counts := n.smp.Begin(n.line.take(t0.Add(n.now), n.smp.Buf), scanTime(n.scanned, n.prevScan))
	kernel := uint64(n.rate * n.counted.Seconds())
	defer func() { n.prevScan, n.scanned, n.prevKernel = n.now, true, kernel }()
	if n.now < n.loaded {
		return simScan{}, false
	}
	// The delta as prog.ProgramDelta makes it: all of a program loaded since
	// the previous scan, the growth of a known one.
	d := prog.Rates{Runs: kernel - n.prevKernel}
	p := &prog.Program{ID: 1, LoadTime: t0.Add(n.loaded), RunCount: kernel}
	dt := time.Duration(0)
	if n.scanned {
		dt = n.now - n.prevScan
	}
	d = n.smp.Program(p, d, dt)
	return simScan{est: p.RunCount, delta: d.Runs, kernelDelta: kernel - n.prevKernel,
		truth: uint64(n.rate * (n.now - max(n.loaded, 0)).Seconds()), counts: counts, dt: dt}, true
}

func scanTime(scanned bool, d time.Duration) time.Time {
	if !scanned {
		return time.Time{}
	}
	return t0.Add(d)
}

// A simulated node, steady program, other holders coming and going:
// scan after scan the estimate never goes down, its delta is its growth,
// an interval the other holder spans is the kernel's exact count and says
// so, the others say sampled, and every interval is close to the runs
// made (the simulation's rate is perfectly steady).
func TestSamplerHolderComesAndGoes(t *testing.T) {
	const rate = 10_000.0
	for _, c := range []struct {
		name             string
		window, period   time.Duration
		every            time.Duration
		holdFrom, holdTo time.Duration
		end              time.Duration
	}{
		{"200ms of 1s, scans every 300ms", 200 * time.Millisecond, time.Second, 300 * time.Millisecond, 4150 * time.Millisecond, 8150 * time.Millisecond, 12 * time.Second},
		{"the chart's 1s of 10s, scans every 10s", time.Second, 10 * time.Second, 10 * time.Second, 25 * time.Second, 55 * time.Second, 90 * time.Second},
		{"1s of 10s, a holder from inside a window", time.Second, 10 * time.Second, 10 * time.Second, 30500 * time.Millisecond, 62 * time.Second, 90 * time.Second},
		{"1s of 10s, scans every 3.7s", time.Second, 10 * time.Second, 3700 * time.Millisecond, 21 * time.Second, 47 * time.Second, 90 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNode(c.window, c.period, rate, -time.Hour)
			n.holdFrom, n.holdTo = c.holdFrom, c.holdTo
			n.scan() // the baseline
			var prev, first simScan
			var firstAt time.Duration
			for i := 1; n.now < c.end; i++ {
				n.until(n.now + c.every)
				s, _ := n.scan()
				made := uint64(rate * s.dt.Seconds())
				inside := n.now-c.every > c.holdFrom && n.now < c.holdTo
				outside := n.now-c.every >= c.holdTo || n.now < c.holdFrom
				switch {
				case s.est < prev.est:
					t.Errorf("scan %d: estimate went down, %d → %d", i, prev.est, s.est)
				case s.delta != s.est-prev.est:
					t.Errorf("scan %d: delta %d, but the estimate grew %d → %d", i, s.delta, prev.est, s.est)
				case inside && (s.delta != s.kernelDelta || s.counts != CountsExact):
					t.Errorf("scan %d at %v: the other holder spans the interval, yet %d counted of the kernel's %d, counts %s", i, n.now, s.delta, s.kernelDelta, s.counts)
				case outside && s.counts != CountsSampled:
					t.Errorf("scan %d at %v: no other holder, counts %s", i, n.now, s.counts)
				case n.now > 2*c.period && math.Abs(float64(s.delta)-float64(made)) > 0.02*float64(made):
					t.Errorf("scan %d at %v: %d counted of %d runs made (kernel %d, %s)", i, n.now, s.delta, made, s.kernelDelta, s.counts)
				}
				if firstAt == 0 && n.now > c.period {
					first, firstAt = s, n.now
				}
				prev = s
			}
			if got, want := float64(prev.est-first.est), rate*(n.now-firstAt).Seconds(); math.Abs(got-want) > 0.01*want {
				t.Errorf("estimate %v over the run, want %v within 1%%", got, want)
			}
		})
	}
}

// A program loaded in a window is counted from its load: early in the
// window its first scan has the estimate of every run since; late in it,
// no more than the kernel counted until the next window measures a rate,
// and then every run since the load.
func TestSamplerLoadMidWindow(t *testing.T) {
	const rate = 10_000.0
	for _, c := range []struct {
		name        string
		into        time.Duration
		measuredNow bool
	}{{"early", 50 * time.Millisecond, true}, {"late", 330 * time.Millisecond, false}, {"between windows", 1000 * time.Millisecond, false}} {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNode(400*time.Millisecond, 2*time.Second, rate, 2*time.Second+c.into)
			n.until(time.Second)
			n.scan() // before the load
			n.until(3200 * time.Millisecond)
			s, ok := n.scan()
			if !ok {
				t.Fatal("the program is not loaded at its first scan")
			}
			if c.measuredNow && math.Abs(float64(s.est)-float64(s.truth)) > 0.01*float64(s.truth) {
				t.Errorf("first scan: %d counted of %d runs made since the load", s.est, s.truth)
			}
			if !c.measuredNow && (s.est > s.truth || s.est != s.kernelDelta) {
				t.Errorf("first scan, no rate yet: %d counted, the kernel %d of %d runs made", s.est, s.kernelDelta, s.truth)
			}
			n.until(5200 * time.Millisecond)
			s2, _ := n.scan()
			if s2.est < s.est || math.Abs(float64(s2.est)-float64(s2.truth)) > 0.01*float64(s2.truth) {
				t.Errorf("after the next window: %d counted (first %d) of %d runs made since the load", s2.est, s.est, s2.truth)
			}
		})
	}
}
