package agent

import (
	"math"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/steady"
)

// sampledScan is one scan of a test of sampled counts: the program's run
// count and interval delta in the snapshot beside the runs made (read with
// the steady program paused, so exactly the runs the kernel could count).
type sampledScan struct {
	snap        *Snapshot
	runs, delta uint64
	fired       uint64
	heldByTest  bool // the test held a stats fd at this scan
}

func scanSteady(t *testing.T, a *Agent, sp *steady.Program, held bool) sampledScan {
	t.Helper()
	var s *Snapshot
	fired := sp.Paused(func() { s = scan(t, a) })
	p := findProg(s, sp.ID)
	if p == nil {
		t.Fatalf("program %d not in the snapshot", sp.ID)
	}
	return sampledScan{snap: s, runs: p.RunCount, delta: p.Delta.Runs, fired: fired, heldByTest: held}
}

// checkSampledScans checks what a sampled run count must be, scan after
// scan: it never goes down, each delta is its growth, an interval in which
// the test held stats throughout is exactly the runs made and says so, one
// that says exact is, and no estimated interval counts more than twice
// the program's rate over its length (a holder's exact counts scaled by
// period/window would; the rate, not the runs made in the interval, as
// the steady program catches up after the machine stalls it). It returns the estimate and the
// runs made over the scans.
func checkSampledScans(t *testing.T, scans []sampledScan, rate float64) (est, truth uint64) {
	t.Helper()
	for i := 1; i < len(scans); i++ {
		prev, cur := scans[i-1], scans[i]
		made := cur.fired - prev.fired
		switch {
		case cur.runs < prev.runs:
			t.Errorf("scan %d: run count went down, %d → %d (runs made %d)", i, prev.runs, cur.runs, made)
		case cur.delta != cur.runs-prev.runs:
			t.Errorf("scan %d: delta %d, but the run count grew %d → %d", i, cur.delta, prev.runs, cur.runs)
		}
		if bound := 2 * rate * cur.snap.Interval.Seconds(); !(prev.heldByTest && cur.heldByTest) && float64(cur.delta) > bound {
			t.Errorf("scan %d: %d runs counted in %s, over twice the rate of %.0f/s (%d runs made)", i, cur.delta, cur.snap.Interval.Round(time.Millisecond), rate, made)
		}
		switch counts := cur.snap.Stats.Counts; {
		case prev.heldByTest && cur.heldByTest && (cur.delta != made || counts != CountsExact):
			t.Errorf("scan %d: stats held throughout the interval, yet %d runs counted of %d made, counts %q", i, cur.delta, made, counts)
		case counts == CountsExact && cur.delta != made:
			// Another tool on the machine may hold stats too (a
			// sampled agent's windows): exact must then be true.
			t.Errorf("scan %d: counts exact, yet %d runs counted of %d made", i, cur.delta, made)
		case counts != CountsExact && counts != CountsSampled:
			t.Errorf("scan %d: counts %q, want exact or sampled", i, counts)
		}
	}
	first, last := scans[0], scans[len(scans)-1]
	return last.runs - first.runs, last.fired - first.fired
}

func within(t *testing.T, what string, est, truth uint64, pct float64) {
	t.Helper()
	errPct := 100 * math.Abs(float64(est)-float64(truth)) / float64(truth)
	t.Logf("%s: runs made %d, counted %d: error %.2f%%", what, truth, est, errPct)
	if errPct > pct {
		t.Errorf("%s: %d counted of %d runs made: error %.1f%%, want within %v%%", what, est, truth, errPct, pct)
	}
}

// A program run at a known steady rate while stats are sampled (200 ms of
// every second), and another holder of stats (the test, as a local
// `bpfleet top` or `bpftool prog profile` would) that appears mid-interval
// for 3 s and leaves: scan by scan the run count never goes down, no
// interval counts the holder's exact runs scaled up, the intervals the
// holder spans are exact, and the whole is within 5% of the runs made.
func TestSampledHolderComesAndGoes(t *testing.T) {
	skipIfStatsOn(t)
	const rate = 20_000.0
	sp := steady.Start(t, "steady", rate)
	a := newTestAgentWith(t, Config{StatsMode: StatsSampled, StatsWindow: 200 * time.Millisecond, StatsPeriod: time.Second, NoIterator: true})

	scanSteady(t, a, sp, false) // the baseline
	time.Sleep(1100 * time.Millisecond)
	scans := []sampledScan{scanSteady(t, a, sp, false)} // a first rate
	steady.HolderComesAndGoes(t, func(held bool) { scans = append(scans, scanSteady(t, a, sp, held)) })
	est, truth := checkSampledScans(t, scans, rate)
	within(t, "sampled, a holder coming and going", est, truth, 5)
}

// waitHeld waits until the sampled mode's fd is held (a window is open)
// or not, and returns when it saw it.
func waitHeld(t *testing.T, a *Agent, want bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		held := a.stats.Held()
		if held == want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stats window did not open or close (want held %v)", want)
		}
		time.Sleep(time.Millisecond)
	}
}

// windowOpens waits for the sampled mode's next window to open.
func windowOpens(t *testing.T, a *Agent) time.Time {
	t.Helper()
	waitHeld(t, a, false)
	return waitHeld(t, a, true)
}

// A program loaded while a sampled window is open (400 ms of every 2 s) is
// counted from its load: early in the window its first scan after the
// window already has the estimate of every run since the load; late in it
// (too little on-time to measure) its first count is no more than the
// runs made, and once the next window measured it, the estimate covers
// every run since the load. Which of the two a run is, is decided by when
// the program really loaded (a busy machine may delay the test).
func TestSampledLoadMidWindow(t *testing.T) {
	skipIfStatsOn(t)
	const (
		rate   = 20_000.0
		window = 400 * time.Millisecond
		period = 2 * time.Second
	)
	for _, c := range []struct {
		name string
		into time.Duration
	}{{"early in the window", 50 * time.Millisecond}, {"late in the window", 330 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAgentWith(t, Config{StatsMode: StatsSampled, StatsWindow: window, StatsPeriod: period, NoIterator: true})
			scan(t, a)
			opened := windowOpens(t, a)
			time.Sleep(c.into)
			sp := steady.Start(t, "loaded_mid", rate)
			waitHeld(t, a, false)
			time.Sleep(800 * time.Millisecond) // off time in the first interval
			first := scanSteady(t, a, sp, false)
			p := findProg(first.snap, sp.ID)
			if !p.New {
				t.Fatalf("program %d is not new in its first scan", sp.ID)
			}
			if into := p.LoadTime.Sub(opened); into < window/2-50*time.Millisecond {
				within(t, "first scan", first.runs, first.fired, 10)
			} else if float64(first.runs) > 1.1*float64(first.fired) {
				t.Errorf("first scan, loaded %v into the window: %d counted of %d runs made, before any measurement", into.Round(time.Millisecond), first.runs, first.fired)
			}
			windowOpens(t, a)
			waitHeld(t, a, false) // the next window, whole
			second := scanSteady(t, a, sp, false)
			checkSampledScans(t, []sampledScan{first, second}, rate)
			within(t, "after the next window", second.runs, second.fired, 10)
		})
	}
}
