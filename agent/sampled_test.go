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
	snap         *Snapshot
	runs, delta  uint64
	fired        uint64
	heldByTest   bool // the test held a stats fd at this scan
	intervalRate float64
}

func scanSteady(t *testing.T, a *Agent, sp *steady.Program, held bool) sampledScan {
	t.Helper()
	var s *Snapshot
	fired := sp.Paused(func() { s = scan(t, a) })
	p := findProg(s, sp.ID)
	if p == nil {
		t.Fatalf("program %d not in the snapshot", sp.ID)
	}
	return sampledScan{snap: s, runs: p.RunCount, delta: p.Delta.Runs, fired: fired, heldByTest: held, intervalRate: p.Delta.RunsPerSec}
}

// checkSampledScans checks what a sampled run count must be, scan after
// scan: it never goes down, each delta is its growth, no interval counts
// far more than the runs made (a holder's exact counts scaled by
// period/window would), an interval in which the test held stats
// throughout is exactly the runs made and says so, and one without is
// sampled. It returns the estimate and the
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
		if slack := uint64(rate / 10); cur.delta > 2*made+slack {
			t.Errorf("scan %d: %d runs counted in an interval of %d runs made (%s)", i, cur.delta, made, cur.snap.Interval.Round(time.Millisecond))
		}
		switch counts := cur.snap.Stats.Counts; {
		case prev.heldByTest && cur.heldByTest && (cur.delta != made || counts != CountsExact):
			t.Errorf("scan %d: stats held throughout the interval, yet %d runs counted of %d made, counts %q", i, cur.delta, made, counts)
		case !prev.heldByTest && !cur.heldByTest && counts != CountsSampled:
			t.Errorf("scan %d: counts %q with no other holder, want sampled", i, counts)
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

// windowOpens waits for the sampled mode's next window to open.
func windowOpens(t *testing.T, a *Agent) {
	t.Helper()
	held := func() bool {
		a.stats.mu.Lock()
		defer a.stats.mu.Unlock()
		return a.stats.holder != nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for held() {
		if time.Now().After(deadline) {
			t.Fatal("the stats window did not close")
		}
		time.Sleep(time.Millisecond)
	}
	for !held() {
		if time.Now().After(deadline) {
			t.Fatal("no stats window opened")
		}
		time.Sleep(time.Millisecond)
	}
}

// A program loaded while a sampled window is open (400 ms of every 2 s) is
// counted from its load: early in the window its first scan after the
// window already has the estimate of every run since the load; late in it
// (too little on-time to measure) its first count is no more than the
// runs made, and once the next window measured it, the estimate covers
// every run since the load.
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
			windowOpens(t, a)
			time.Sleep(c.into)
			sp := steady.Start(t, "loaded_mid", rate)
			time.Sleep(window - c.into + 800*time.Millisecond)
			first := scanSteady(t, a, sp, false)
			if !findProg(first.snap, sp.ID).New {
				t.Fatalf("program %d is not new in its first scan", sp.ID)
			}
			if c.into < window/2 {
				within(t, "first scan", first.runs, first.fired, 10)
			} else if first.runs > first.fired+uint64(rate/100) {
				t.Errorf("first scan: %d counted of %d runs made, before any measurement", first.runs, first.fired)
			}
			time.Sleep(period)
			second := scanSteady(t, a, sp, false)
			checkSampledScans(t, []sampledScan{first, second}, rate)
			within(t, "after the next window", second.runs, second.fired, 10)
		})
	}
}
