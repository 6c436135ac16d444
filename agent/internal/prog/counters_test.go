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
			Rates{Runs: 50, RunTimeNs: 2000, Misses: 2, LinkMissed: 2, LinkMissedBy: LinkMisses{Unknown: 2}}},
		{"link misses by reason", Counters{LinkMissed: 9, LinkMissedBy: LinkMisses{Nesting: 5, Maxactive: 3, Unknown: 1}},
			Counters{LinkMissed: 4, LinkMissedBy: LinkMisses{Nesting: 2, Maxactive: 1, Unknown: 1}}, true, t0, prevScan,
			Rates{LinkMissed: 5, LinkMissedBy: LinkMisses{Nesting: 3, Maxactive: 2}}},
		{"a part growing past the sum (a link's split appeared) is clamped", Counters{LinkMissed: 9, LinkMissedBy: LinkMisses{Nesting: 9}},
			Counters{LinkMissed: 7, LinkMissedBy: LinkMisses{Unknown: 7}}, true, t0, prevScan,
			Rates{LinkMissed: 2, LinkMissedBy: LinkMisses{Nesting: 2}}},
		{"loaded inside the interval: link misses whole, by reason", Counters{LinkMissed: 4, LinkMissedBy: LinkMisses{Maxactive: 3, Unknown: 1}}, Counters{}, false, prevScan.Add(time.Millisecond), prevScan,
			Rates{LinkMissed: 4, LinkMissedBy: LinkMisses{Maxactive: 3, Unknown: 1}}},
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

// TestCountersOfLinkSplit sums the links' missed by reason: a link whose
// split the reader knows adds its parts, one read by syscall its whole
// sum as unknown, a link without missed nothing.
func TestCountersOfLinkSplit(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	p := Program{Links: []Link{
		{ID: 1, Missed: u(7), MissedNesting: u(4), MissedMaxactive: u(3)},
		{ID: 2, Missed: u(5)},
		{ID: 3},
		{ID: 4, Missed: u(2), MissedNesting: u(2), MissedMaxactive: u(0)},
	}}
	c := CountersOf(&p)
	want := LinkMisses{Nesting: 6, Maxactive: 3, Unknown: 5}
	if c.LinkMissed != 14 || c.LinkMissedBy != want {
		t.Errorf("link missed %d by %+v, want 14 by %+v", c.LinkMissed, c.LinkMissedBy, want)
	}
}

func TestSplitLinkMissed(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name               string
		missed             uint64
		nesting, maxactive *uint64
		want               LinkMisses
	}{
		{"known", 7, u(4), u(3), LinkMisses{Nesting: 4, Maxactive: 3}},
		{"unknown: the sum only", 7, nil, nil, LinkMisses{Unknown: 7}},
		{"one part absent is unknown", 7, u(7), nil, LinkMisses{Unknown: 7}},
		{"parts short of the sum: the rest unknown", 7, u(1), u(2), LinkMisses{Nesting: 1, Maxactive: 2, Unknown: 4}},
		{"parts past the sum are clamped", 3, u(2), u(5), LinkMisses{Nesting: 2, Maxactive: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SplitLinkMissed(tc.missed, tc.nesting, tc.maxactive)
			if got != tc.want || got.Sum() != tc.missed {
				t.Errorf("got %+v (sum %d), want %+v (sum %d)", got, got.Sum(), tc.want, tc.missed)
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
		{"two seconds", Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4, LinkMissedBy: LinkMisses{Maxactive: 4}}, 2 * time.Second,
			Rates{Runs: 1000, RunTimeNs: 500_000_000, Misses: 10, LinkMissed: 4, LinkMissedBy: LinkMisses{Maxactive: 4}, RunsPerSec: 500, NsPerRun: 500_000, CPUShare: 0.25, MissesPerSec: 7}},
		{"no runs: ns per run is 0, not NaN", Rates{Misses: 5}, time.Second, Rates{Misses: 5, MissesPerSec: 5}},
		{"first interval has no rates", Rates{Runs: 5, LinkMissed: 1, LinkMissedBy: LinkMisses{Nesting: 1}}, 0, Rates{Runs: 5, LinkMissed: 1, LinkMissedBy: LinkMisses{Nesting: 1}}},
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
