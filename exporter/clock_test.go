package exporter

import (
	"context"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// TestClockStampsEveryPoint: with Config.Clock an hour behind the wall,
// the producers' points carry the clock's time at the Update (not at the
// collection: a simulated clock that stepped on in between would stamp
// the older scan with the newer time), and restamp (the OTLP export's)
// leaves no point of the SDK's instruments on the wall clock: a
// simulator's history is not mixed with the present.
func TestClockStampsEveryPoint(t *testing.T) {
	now := time.Now().Add(-time.Hour).Truncate(time.Second)
	clock := now
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload, NodeName: "node-a", Clock: func() time.Time { return clock },
		Kernel: agent.KernelInfo{Release: "6.18.0-test", Arch: "x86_64"}})
	p := prog(42, 2_500_000_000, u64(17))
	p.LoadTime = now.Add(-time.Minute)
	e.Update(context.Background(), snapshot(1, p))
	clock = now.Add(10 * time.Second) // the next round's, before the export
	_, rm := collect(t, r)
	produced, wall := 0, 0
	eachPoint(&rm, func(_ string, _ bool, tm, _ *time.Time) {
		if tm.Equal(now) {
			produced++
		} else {
			wall++
		}
	})
	if produced == 0 || wall == 0 {
		t.Fatalf("collected %d points on the clock and %d off it: want both (the producers' on it, the SDK instruments' on the wall)", produced, wall)
	}
	restamp(&rm, e.stamp(e.latest()), e.started)
	eachPoint(&rm, func(name string, _ bool, tm, start *time.Time) {
		if !tm.Equal(now) {
			t.Errorf("%s: point at %v after restamp, want the clock's %v", name, *tm, now)
		}
		if start.After(now) {
			t.Errorf("%s: start %v after the point's time %v", name, *start, now)
		}
	})
	if !e.started.Equal(now) {
		t.Errorf("exporter started at %v, want the clock's %v", e.started, now)
	}
}
