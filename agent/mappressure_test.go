package agent

import (
	"testing"
	"time"
)

// TestPressureCounts: a count's rate comes from the map's last read, none
// at its first or when the count went back (a probe's table reset); an
// entry is reused only when every count, rate and flag is the same.
func TestPressureCounts(t *testing.T) {
	u := func(n uint64) *uint64 { return &n }
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name    string
		n       uint64
		prev    *uint64
		dt      time.Duration
		rate    float64
		hasRate bool
	}{
		{"first read", 10, nil, time.Second, 0, false},
		{"grew", 40, u(10), 2 * time.Second, 15, true},
		{"still", 40, u(40), time.Second, 0, true},
		{"went back", 5, u(40), time.Second, 0, false},
		{"no time", 50, u(40), 0, 0, false},
	} {
		got := newCounted(c.n, c.prev, c.dt)
		if !got.known || got.n != c.n || got.rateKnown != c.hasRate || got.rate != c.rate {
			t.Errorf("%s: %+v, want n %d rate %v (%v)", c.name, got, c.n, c.rate, c.hasRate)
		}
	}
	m := &Map{Evictions: u(40), EvictionsPerSecond: f(15), PressureSinceStart: true}
	mp := mapPressure{evicted: newCounted(40, u(10), 2*time.Second), sinceStart: true}
	if !mp.same(m) {
		t.Errorf("%+v: not the same as %+v", mp, m)
	}
	for _, changed := range []mapPressure{
		{evicted: newCounted(41, u(10), 2*time.Second), sinceStart: true},
		{evicted: newCounted(40, u(20), 2*time.Second), sinceStart: true},
		{evicted: newCounted(40, u(10), 2*time.Second)},
		{evicted: newCounted(40, u(10), 2*time.Second), refused: newCounted(0, nil, 0), sinceStart: true},
	} {
		if changed.same(m) {
			t.Errorf("%+v: the same as %+v", changed, m)
		}
	}
	var none *pressure // --map-pressure=false
	if mp := none.of(1, "lru_hash", nil, time.Second); mp.evicted.known || mp.refused.known || mp.sinceStart {
		t.Errorf("without the probes: %+v", mp)
	}
}
