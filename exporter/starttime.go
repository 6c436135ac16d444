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
	eachPoint(rm, func(_ string, gauge bool, _, start *time.Time) {
		if gauge {
			*start = time.Time{}
		}
	})
}

// restamp stamps every point with now, and a start not before now with
// started: with Config.Clock the SDK's instruments still stamp the wall
// clock (their collection time, the provider's start), which a simulated
// clock's points must not be mixed with. The producers' points already
// carry the clock's time; the rule for starts is theirs (series.go).
func restamp(rm *metricdata.ResourceMetrics, now, started time.Time) {
	eachPoint(rm, func(_ string, _ bool, tm, start *time.Time) {
		*tm, *start = now, startBefore(*start, now, started)
	})
}

// startBefore is start, or started where start is not before now.
func startBefore(start, now, started time.Time) time.Time {
	if !start.IsZero() && !start.Before(now) {
		return started
	}
	return start
}

// eachPoint calls f with the metric's name, whether it is a gauge, and
// the time and start of each of its points in rm, to read or set.
func eachPoint(rm *metricdata.ResourceMetrics, f func(metric string, gauge bool, tm, start *time.Time)) {
	for i := range rm.ScopeMetrics {
		ms := rm.ScopeMetrics[i].Metrics
		for j := range ms {
			name := ms[j].Name
			switch d := ms[j].Data.(type) {
			case metricdata.Gauge[int64]:
				points(d.DataPoints, name, true, f)
			case metricdata.Gauge[float64]:
				points(d.DataPoints, name, true, f)
			case metricdata.Sum[int64]:
				points(d.DataPoints, name, false, f)
			case metricdata.Sum[float64]:
				points(d.DataPoints, name, false, f)
			case metricdata.Histogram[float64]:
				for k := range d.DataPoints {
					f(name, false, &d.DataPoints[k].Time, &d.DataPoints[k].StartTime)
				}
			case metricdata.ExponentialHistogram[float64]:
				for k := range d.DataPoints {
					f(name, false, &d.DataPoints[k].Time, &d.DataPoints[k].StartTime)
				}
			}
		}
	}
}

func points[N int64 | float64](pts []metricdata.DataPoint[N], name string, gauge bool, f func(string, bool, *time.Time, *time.Time)) {
	for k := range pts {
		f(name, gauge, &pts[k].Time, &pts[k].StartTime)
	}
}
