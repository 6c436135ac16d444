package exporter

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// seriesProducer hands the per-program (program level) and per-workload
// (workload level) counters to every metric reader as already aggregated
// data, straight from the view. They are thousands of series whose values
// the kernel already accumulated: through observable instruments each
// value cost an Observe call — an attribute-set hash and a map lookup in
// the SDK — and each series a map entry, 2.8 of the 8 ms an export of
// 1,000 programs cost (make bench BENCH=agentcpu). The SDK's cardinality
// limit does not apply to them: --max-programs caps them first.
type seriesProducer struct {
	e *Exporter
	// reuse: the data points of one Produce are written over by the next,
	// for a caller that is done with them by then and never calls
	// concurrently (a pushed destination: push.go). Other readers (the
	// Prometheus exporter's scrapes, Config.Readers) get fresh ones.
	reuse bool
	buf   seriesBuf
}

// seriesBuf is what one Produce returns: 3,000 data points at 1,000
// workload keys, 300 KB that a reused buffer does not make again every
// export.
type seriesBuf struct {
	runs, misses, linkMissed []metricdata.DataPoint[int64]
	runTime                  []metricdata.DataPoint[float64]
	ms                       []metricdata.Metrics
	sm                       []metricdata.ScopeMetrics
}

// seriesKind names one of the seriesProducer's counters: the metrics
// table's rows say which (produced), at the program and workload levels.
type seriesKind int

const (
	seriesRunCount seriesKind = iota + 1
	seriesRunTime
	seriesMisses
	seriesLinkMissed
)

// Produce implements sdkmetric.Producer.
func (p *seriesProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	if p == nil || p.e == nil {
		return nil, nil
	}
	e := p.e
	// Held while reading: the workload series are the exporter's own,
	// which the next Update changes (the view and they change together,
	// under e.mu). An Update waits for this loop, ~0.1 ms at 1,000 keys.
	e.mu.Lock()
	defer e.mu.Unlock()
	v := e.view
	if v == nil {
		return nil, nil
	}
	now := time.Now()
	// A series with no start of its own counts from the exporter's start,
	// as an instrument's would; one that started after the export time
	// (a clock step) too.
	start := func(t time.Time) time.Time {
		if t.IsZero() || !t.Before(now) {
			return e.started
		}
		return t
	}
	var b seriesBuf
	if p.reuse {
		b = p.buf
	}
	n := len(v.programs) + len(v.workloads)
	runs := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: slices.Grow(b.runs[:0], n)}
	runTime := metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: slices.Grow(b.runTime[:0], n)}
	misses := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: slices.Grow(b.misses[:0], n)}
	linkMissed := metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: b.linkMissed[:0]}
	// The stats mode shapes the run metrics as runsFromView does for the
	// instruments: absent with stats off (the kernel did not count).
	// Misses are exact in every mode.
	off := v.stats.mode == agent.StatsOff
	addRuns := func(attrs attribute.Set, st time.Time, n, ns uint64) {
		if off {
			return
		}
		runs.DataPoints = append(runs.DataPoints, metricdata.DataPoint[int64]{Attributes: attrs, StartTime: st, Time: now, Value: int64(n)})
		runTime.DataPoints = append(runTime.DataPoints, metricdata.DataPoint[float64]{Attributes: attrs, StartTime: st, Time: now, Value: float64(ns) / 1e9})
	}
	for i := range v.programs {
		s := &v.programs[i]
		st := start(s.start)
		addRuns(s.attrs, st, s.runs, s.runTimeNs)
		if s.misses != nil {
			misses.DataPoints = append(misses.DataPoints, metricdata.DataPoint[int64]{Attributes: s.attrs, StartTime: st, Time: now, Value: int64(*s.misses)})
		}
	}
	for i := range v.links {
		s := &v.links[i]
		linkMissed.DataPoints = append(linkMissed.DataPoints, metricdata.DataPoint[int64]{Attributes: s.attrs, StartTime: start(s.start), Time: now, Value: int64(s.missed)})
	}
	for i := range v.workloads {
		w := v.workloads[i]
		st := start(w.start)
		addRuns(w.attrs, st, w.acc.runs, w.acc.runTimeNs)
		if w.hasMisses {
			misses.DataPoints = append(misses.DataPoints, metricdata.DataPoint[int64]{Attributes: w.attrs, StartTime: st, Time: now, Value: int64(w.acc.misses)})
		}
		if w.hasLinks {
			linkMissed.DataPoints = append(linkMissed.DataPoints, metricdata.DataPoint[int64]{Attributes: w.attrs, StartTime: st, Time: now, Value: int64(w.acc.linkMissed)})
		}
	}
	ms := b.ms[:0]
	// The table's rows of the level that name a series kind, in table order.
	for _, d := range metricDefs {
		if d.Value.series == 0 || !slices.Contains(d.Levels, e.cfg.Level) {
			continue
		}
		var data metricdata.Aggregation
		var points int
		switch d.Value.series {
		case seriesRunCount:
			data, points = runs, len(runs.DataPoints)
		case seriesRunTime:
			data, points = runTime, len(runTime.DataPoints)
		case seriesMisses:
			data, points = misses, len(misses.DataPoints)
		case seriesLinkMissed:
			data, points = linkMissed, len(linkMissed.DataPoints)
		}
		if points > 0 {
			ms = append(ms, metricdata.Metrics{Name: d.Name, Description: d.Description, Unit: d.Unit, Data: data})
		}
	}
	if p.reuse {
		p.buf = seriesBuf{runs: runs.DataPoints, runTime: runTime.DataPoints, misses: misses.DataPoints, linkMissed: linkMissed.DataPoints, ms: ms, sm: b.sm}
	}
	if len(ms) == 0 {
		return nil, nil
	}
	// The instruments' scope: the series are the same metrics, from the
	// same library, whichever way they reach the reader.
	sm := append(b.sm[:0], metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: meterName}, Metrics: ms})
	if p.reuse {
		p.buf.sm = sm
	}
	return sm, nil
}
