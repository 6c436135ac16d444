package exporter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// BenchmarkUpdate is the exporter's per-scan work (Update: the view of a
// snapshot) at 1,000 programs with distinct names, and one collection (the
// producer and the remaining instruments, no export) every scan. In "busy"
// every program's counters grew since the previous scan; in "idle" 50 did
// and the other 950 keep their snapshot entries, as the agent hands out
// an unchanged program's entry again.
func BenchmarkUpdate(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		for _, busy := range []bool{true, false} {
			name := level.String() + "/idle"
			if busy {
				name = level.String() + "/busy"
			}
			b.Run(name, func(b *testing.B) { benchUpdate(b, level, busy) })
		}
	}
}

func benchUpdate(b *testing.B, level Level, busy bool) {
	{
		{
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			b.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
			e, err := New(context.Background(), Config{Level: level, MaxPrograms: 1000})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Shutdown(context.Background())
			now := time.Now()
			ps := make([]agent.ProgramStat, 1000)
			for i := range ps {
				ps[i] = podProg(uint32(i+1), fmt.Sprintf("flt_%04d", i), "w", "w-1", 100, now.Add(-time.Hour), 10, 0)
			}
			ctx := context.Background()
			snap := snapshot(1, ps...)
			for n := 0; b.Loop(); n++ {
				for i, p := range snap.Programs {
					if busy || i%20 == n%20 {
						c := *p
						c.RunCount += 7
						c.RunTimeNs += 700
						snap.Programs[i] = &c
					}
				}
				snap.Seq, snap.Time = uint64(n+2), snap.Time.Add(10*time.Second)
				e.Update(ctx, snap)
			}
		}
	}
}
