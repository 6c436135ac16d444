package fleetsim

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Pacer starts a fleet's rounds on a fixed wall-clock tick, as a real
// fleet's agents export every --interval: a backend then sees exports,
// rule evaluations and its own background work in a fleet's proportions,
// and a round's simulated time passes in wall time (a 5-minute cut lasts
// 5 minutes for the rules' windows and the absent-agent alerts). Every 0
// is the unpaced mode: rounds as fast as the exports go (the short test).
type Pacer struct {
	Every time.Duration
	next  time.Time
	// Overruns counts the rounds that took longer than Every (the next
	// started late, at once, and the ticks after it count from then);
	// Late is the most one started late.
	Overruns int
	Late     time.Duration
}

// Wait returns when the next round may start: at once the first time (the
// clock starts), then at each tick. A round that overran is counted, never
// waited for.
func (p *Pacer) Wait(ctx context.Context) error {
	if p.Every <= 0 {
		return ctx.Err()
	}
	now := time.Now()
	switch {
	case p.next.IsZero():
		p.next = now.Add(p.Every)
		return ctx.Err()
	case now.After(p.next):
		p.Overruns++
		p.Late = max(p.Late, now.Sub(p.next))
		p.next = now.Add(p.Every)
		return ctx.Err()
	}
	tm := time.NewTimer(p.next.Sub(now))
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
	}
	p.next = p.next.Add(p.Every)
	return nil
}

// BenchPace is the benches' tick: interval (the simulated time a round
// stands for) unless BPFLEET_FLEET_PACE gives a duration (0: unpaced).
func BenchPace(interval time.Duration) (time.Duration, error) {
	s := os.Getenv("BPFLEET_FLEET_PACE")
	if s == "" {
		return interval, nil
	}
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("BPFLEET_FLEET_PACE=%q: want a duration such as 10s, or 0 for rounds as fast as the exports go", s)
	}
	return d, nil
}
