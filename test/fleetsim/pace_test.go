package fleetsim

import (
	"context"
	"testing"
	"time"
)

func TestBenchPace(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", 10 * time.Second, false},
		{"0", 0, false},
		{"0s", 0, false},
		{"2s", 2 * time.Second, false},
		{"-1s", 0, true},
		{"ten", 0, true},
	} {
		t.Setenv("BPFLEET_FLEET_PACE", c.env)
		got, err := BenchPace(10 * time.Second)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("BPFLEET_FLEET_PACE=%q: %v, %v; want %v (error: %v)", c.env, got, err, c.want, c.bad)
		}
	}
}

// TestPacer holds what the pacer promises, on however busy a machine: a
// round never starts before its tick, and a round that took longer than a
// tick is counted.
func TestPacer(t *testing.T) {
	ctx := context.Background()
	const every = 40 * time.Millisecond
	p := &Pacer{Every: every}
	start := time.Now()
	for i := range 4 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if el, tick := time.Since(start), time.Duration(i)*every; el < tick {
			t.Fatalf("round %d started %v after the first, before its tick at %v", i, el, tick)
		}
	}
	before := p.Overruns
	time.Sleep(3 * every) // a round that overran its tick
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Overruns != before+1 || p.Late < 2*every {
		t.Fatalf("a round of %v at a %v tick: %d overruns (want %d), late %v (want at least %v)", 3*every, every, p.Overruns, before+1, p.Late, 2*every)
	}
	// Unpaced: no wait, nothing counted.
	u := &Pacer{}
	t0 := time.Now()
	for range 3 {
		if err := u.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if u.Overruns != 0 || time.Since(t0) > time.Second {
		t.Fatalf("unpaced: %d overruns, %v for 3 waits", u.Overruns, time.Since(t0))
	}
}
