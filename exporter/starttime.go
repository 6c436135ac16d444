package exporter

import (
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// stampStarts sets the OTLP start time of the counter points whose series
// did not start with the exporter: the SDK gives every point of an
// asynchronous counter the instrument's creation time, but a program
// loaded later counted from zero at its load time. With the real start
// time a backend can tell a new series' first value is all increase:
// Prometheus' created-timestamp-zero-ingestion writes a zero sample there,
// so increase() counts the misses of a reloaded program's first interval.
// Gauges get no start time: it has no meaning for them, and Prometheus
// would write a zero at it.
func stampStarts(rm *metricdata.ResourceMetrics, v *view) {
	for i := range rm.ScopeMetrics {
		ms := rm.ScopeMetrics[i].Metrics
		for j := range ms {
			switch d := ms[j].Data.(type) {
			case metricdata.Sum[int64]:
				stampSum(d.DataPoints, v)
			case metricdata.Sum[float64]:
				stampSum(d.DataPoints, v)
			case metricdata.Gauge[int64]:
				clearStart(d.DataPoints)
			case metricdata.Gauge[float64]:
				clearStart(d.DataPoints)
			}
		}
	}
}

func stampSum[N int64 | float64](pts []metricdata.DataPoint[N], v *view) {
	if v == nil {
		return
	}
	for k := range pts {
		if t, ok := v.starts[pts[k].Attributes.Equivalent()]; ok && t.Before(pts[k].Time) {
			pts[k].StartTime = t
		}
	}
}

func clearStart[N int64 | float64](pts []metricdata.DataPoint[N]) {
	for k := range pts {
		pts[k].StartTime = time.Time{}
	}
}
