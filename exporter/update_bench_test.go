package exporter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// BenchmarkUpdate is the exporter's per-scan work (Update: the view of a
// snapshot) at 1,000 programs with distinct names, every program's
// counters grown since the previous scan, and one collection (the
// producer and the remaining instruments, no export) every scan.
func BenchmarkUpdate(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		b.Run(level.String(), func(b *testing.B) {
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
			for n := 0; b.Loop(); n++ {
				for i := range ps {
					ps[i].RunCount += 7
					ps[i].RunTimeNs += 700
				}
				e.Update(ctx, snapshot(uint64(n+1), ps...))
			}
		})
	}
}
