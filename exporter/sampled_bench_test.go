package exporter

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// BenchmarkCollectSampled is one scan's export work with --stats=sampled
// at 1,000 programs whose counters all grew: Update, then one collection
// of every metric (the producer's program and workload counters and the
// instruments), as a reader does before each export.
func BenchmarkCollectSampled(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		b.Run(level.String(), func(b *testing.B) {
			b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			b.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "")
			var e *Exporter
			var opts []sdkmetric.ManualReaderOption
			for _, p := range Producers(&e) {
				opts = append(opts, sdkmetric.WithProducer(p))
			}
			r := sdkmetric.NewManualReader(opts...)
			e, err := New(context.Background(), Config{Level: level, MaxPrograms: 1000, Readers: []sdkmetric.Reader{r}})
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
			snap.Stats.Mode = agent.StatsSampled
			for n := 0; b.Loop(); n++ {
				for i, p := range snap.Programs {
					c := *p
					c.RunCount += 7
					c.RunTimeNs += 700
					snap.Programs[i] = &c
				}
				snap.Seq, snap.Time = uint64(n+2), snap.Time.Add(10*time.Second)
				e.Update(ctx, snap)
				var rm metricdata.ResourceMetrics
				if err := r.Collect(ctx, &rm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
