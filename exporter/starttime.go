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

// restamp stamps every point with now, and a start not before now with
// started: with Config.Clock the SDK's instruments still stamp the wall
// clock (their collection time, the provider's start), which a simulated
// clock's points must not be mixed with. The producers' points already
// carry the clock's time; the rule for starts is theirs (series.go).
func restamp(rm *metricdata.ResourceMetrics, now, started time.Time) {
	for i := range rm.ScopeMetrics {
		ms := rm.ScopeMetrics[i].Metrics
		for j := range ms {
			switch d := ms[j].Data.(type) {
			case metricdata.Gauge[int64]:
				restampPoints(d.DataPoints, now, started)
			case metricdata.Gauge[float64]:
				restampPoints(d.DataPoints, now, started)
			case metricdata.Sum[int64]:
				restampPoints(d.DataPoints, now, started)
			case metricdata.Sum[float64]:
				restampPoints(d.DataPoints, now, started)
			case metricdata.Histogram[float64]:
				for k := range d.DataPoints {
					p := &d.DataPoints[k]
					p.Time, p.StartTime = now, startBefore(p.StartTime, now, started)
				}
			case metricdata.ExponentialHistogram[float64]:
				for k := range d.DataPoints {
					p := &d.DataPoints[k]
					p.Time, p.StartTime = now, startBefore(p.StartTime, now, started)
				}
			}
		}
	}
}

func restampPoints[N int64 | float64](pts []metricdata.DataPoint[N], now, started time.Time) {
	for k := range pts {
		pts[k].Time, pts[k].StartTime = now, startBefore(pts[k].StartTime, now, started)
	}
}

// startBefore is start, or started where start is not before now.
func startBefore(start, now, started time.Time) time.Time {
	if !start.IsZero() && !start.Before(now) {
		return started
	}
	return start
}
