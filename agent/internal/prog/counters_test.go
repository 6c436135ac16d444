package prog

import (
	"math"
	"testing"
	"time"
)

func TestProgramDelta(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prevScan := t0.Add(-time.Second)
	cases := []struct {
		name     string
		cur      Counters
		prev     Counters
		havePrev bool
		loaded   time.Time
		prevScan time.Time
		want     Rates
	}{
		{"growth", Counters{Runs: 150, RunTime: 3000, Misses: 7, LinkMissed: 2}, Counters{Runs: 100, RunTime: 1000, Misses: 5}, true, t0.Add(-time.Hour), prevScan,
			Rates{Runs: 50, RunTimeNs: 2000, Misses: 2, LinkMissed: 2}},
		{"no change (stats switched off by someone else)", Counters{Runs: 100, RunTime: 1000}, Counters{Runs: 100, RunTime: 1000}, true, t0, prevScan, Rates{}},
		{"smaller value is no growth", Counters{Runs: 10, LinkMissed: 1}, Counters{Runs: 100, LinkMissed: 9}, true, t0, prevScan, Rates{}},
		{"first scan ever", Counters{Runs: 100, Misses: 3}, Counters{}, false, t0, time.Time{}, Rates{}},
		{"loaded inside the interval counts whole", Counters{Runs: 100, RunTime: 50, Misses: 3}, Counters{}, false, prevScan.Add(time.Millisecond), prevScan,
			Rates{Runs: 100, RunTimeNs: 50, Misses: 3}},
		{"loaded exactly at previous scan counts whole", Counters{Runs: 1}, Counters{}, false, prevScan, prevScan, Rates{Runs: 1}},
		{"existed before but unread: no history", Counters{Runs: 100}, Counters{}, false, prevScan.Add(-time.Minute), prevScan, Rates{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ProgramDelta(c.cur, c.prev, c.havePrev, c.loaded, c.prevScan); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestWithRates(t *testing.T) {
	cases := []struct {
		name string
		d    Rates
		dt   time.Duration
		want Rates
	}{
		{"two seconds", Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4}, 2 * time.Second,
			Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4, RunsPerSec: 500, NsPerRun: 500_000, CPUShare: 0.25, MissesPerSec: 7}},
		{"no runs: ns per run is 0, not NaN", Rates{Misses: 5}, time.Second, Rates{Misses: 5, MissesPerSec: 5}},
		{"first interval has no rates", Rates{Runs: 5}, 0, Rates{Runs: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := WithRates(c.d, c.dt)
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			if math.IsNaN(got.NsPerRun) || math.IsInf(got.CPUShare, 0) {
				t.Errorf("non-finite rate %+v", got)
			}
		})
	}
}
