package exporter

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// A profiled program's histogram reaches the reader as an OTel histogram
// with the profiler's buckets, count, sum and max; programs not profiled
// (or refused) have none, and the attach-type level still exports it.
func TestProfileHistogram(t *testing.T) {
	p := &profileProducer{}
	r := sdkmetric.NewManualReader(sdkmetric.WithProducer(p))
	e, err := New(context.Background(), Config{Level: LevelAttachType, Readers: []sdkmetric.Reader{r}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	e.prof, p.e = p, e

	buckets := make([]uint64, 64)
	buckets[8], buckets[12], buckets[50] = 90, 9, 1 // 256 ns.., 4 µs.., overflow
	profiled := prog(42, 1000, nil)
	profiled.Profile = &agent.ProfileStat{Buckets: buckets, Runs: 100, SumNs: 90*300 + 9*5000 + 1<<50, MaxNs: 1 << 50}
	refused := prog(43, 10, nil)
	refused.Profile = &agent.ProfileStat{Error: "cannot profile program 43: operation not permitted"}
	e.Update(context.Background(), snapshot(1, profiled, refused, prog(44, 1, nil)))

	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var h *metricdata.Histogram[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == profileMetric {
				d := m.Data.(metricdata.Histogram[float64])
				h = &d
				if m.Unit != "s" {
					t.Errorf("unit %q, want s", m.Unit)
				}
			}
		}
	}
	if h == nil || len(h.DataPoints) != 1 {
		t.Fatalf("want one %s series, got %+v", profileMetric, h)
	}
	dp := h.DataPoints[0]
	if id, _ := dp.Attributes.Value("bpf.program.id"); id.AsInt64() != 42 {
		t.Errorf("series of program %v, want 42", id.String())
	}
	if dp.Count != 100 || len(dp.BucketCounts) != len(dp.Bounds)+1 || h.Temporality != metricdata.CumulativeTemporality {
		t.Fatalf("count %d, %d counts for %d bounds, temporality %v", dp.Count, len(dp.BucketCounts), len(dp.Bounds), h.Temporality)
	}
	// Bucket b of the profiler ([2^b, 2^(b+1)) ns) is the OTel bucket
	// whose upper bound is 2^(b+1) ns: index b.
	if dp.BucketCounts[8] != 90 || dp.BucketCounts[12] != 9 || dp.BucketCounts[len(dp.Bounds)] != 1 {
		t.Errorf("bucket counts %v", dp.BucketCounts)
	}
	if dp.Bounds[8] != 512e-9 {
		t.Errorf("bound 8 = %v, want 512 ns", dp.Bounds[8])
	}
	if m, ok := dp.Max.Value(); !ok || m != float64(uint64(1)<<50)/1e9 {
		t.Errorf("max %v", m)
	}
}
