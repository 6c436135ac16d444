package exporter

import (
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// stampStarts clears the start time of gauge points: it has no meaning for
// them, and Prometheus would write a zero at it. The counters of programs
// and workload keys carry their own start (a program's load time, a key's
// first program's; see series.go): with it a backend can tell a new
// series' first value is all increase — Prometheus'
// created-timestamp-zero-ingestion writes a zero sample there, so
// increase() counts the misses of a reloaded program's first interval.
func stampStarts(rm *metricdata.ResourceMetrics) {
	for i := range rm.ScopeMetrics {
		ms := rm.ScopeMetrics[i].Metrics
		for j := range ms {
			switch d := ms[j].Data.(type) {
			case metricdata.Gauge[int64]:
				clearStart(d.DataPoints)
			case metricdata.Gauge[float64]:
				clearStart(d.DataPoints)
			}
		}
	}
}

func clearStart[N int64 | float64](pts []metricdata.DataPoint[N]) {
	for k := range pts {
		pts[k].StartTime = time.Time{}
	}
}
