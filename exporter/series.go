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
	// sent is what this destination last got of each series, where
	// unchanged series are resent only every Config.ResendUnchanged
	// (pushed destinations only: a scrape that missed a series would
	// mark it stale). gen is the Produce count, stamped on every series
	// seen so that series gone are dropped.
	sent map[attribute.Distinct]*sentSeries
	gen  uint64
}

// sentSeries is one series as a destination last got it: its values
// (runs, run time in ns, misses, link misses; noValue where absent), the
// start its counters count from, and when.
type sentSeries struct {
	v     [4]uint64
	start time.Time
	at    time.Time
	gen   uint64
}

// noValue stands for a value a series does not have (a program without
// recursion_misses, a key without kprobe links).
const noValue = ^uint64(0)

// resendAfter is how long a pushed series whose values did not move is
// left out of exports: Config.ResendUnchanged less half an export
// interval, so that an export a few ms early does not push the resend to
// the next one. 0 (every export sends every series): a scraped or
// in-process reader, no ResendUnchanged, or one within an export interval.
func (p *seriesProducer) resendAfter() time.Duration {
	every := p.e.cfg.exportInterval()
	if !p.reuse || p.e.cfg.ResendUnchanged <= every {
		return 0
	}
	return p.e.cfg.ResendUnchanged - every/2
}

// due says whether a series with these values goes into this export, and
// records it as sent if so. Every series goes out at its first export,
// whenever a value or its start moved, at least every resendAfter, and in
// the final export at shutdown.
func (p *seriesProducer) due(attrs attribute.Set, start, now time.Time, after time.Duration, final bool, v [4]uint64) bool {
	if after == 0 {
		return true
	}
	k := attrs.Equivalent()
	s := p.sent[k]
	if s == nil {
		s = &sentSeries{}
		p.sent[k] = s
	} else if !final && s.v == v && s.start.Equal(start) && now.Sub(s.at) < after {
		s.gen = p.gen
		return false
	}
	*s = sentSeries{v: v, start: start, at: now, gen: p.gen}
	return true
}

// opt is a value for sentSeries: v, or noValue without one.
func opt(v *uint64) uint64 {
	if v == nil {
		return noValue
	}
	return *v
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
	after, final := p.resendAfter(), e.stopping.Load()
	if after > 0 {
		p.gen++
		if p.sent == nil {
			p.sent = make(map[attribute.Distinct]*sentSeries, n)
		}
	}
	due := func(attrs attribute.Set, st time.Time, v [4]uint64) bool {
		return p.due(attrs, st, now, after, final, v)
	}
	for i := range v.programs {
		s := &v.programs[i]
		st := start(s.start)
		if !due(s.attrs, st, [4]uint64{s.runs, s.runTimeNs, opt(s.misses), noValue}) {
			continue
		}
		addRuns(s.attrs, st, s.runs, s.runTimeNs)
		if s.misses != nil {
			misses.DataPoints = append(misses.DataPoints, metricdata.DataPoint[int64]{Attributes: s.attrs, StartTime: st, Time: now, Value: int64(*s.misses)})
		}
	}
	for i := range v.links {
		s := &v.links[i]
		st := start(s.start)
		if !due(s.attrs, st, [4]uint64{noValue, noValue, noValue, s.missed}) {
			continue
		}
		linkMissed.DataPoints = append(linkMissed.DataPoints, metricdata.DataPoint[int64]{Attributes: s.attrs, StartTime: st, Time: now, Value: int64(s.missed)})
	}
	for i := range v.workloads {
		w := v.workloads[i]
		st := start(w.start)
		vals := [4]uint64{w.acc.runs, w.acc.runTimeNs, noValue, noValue}
		if w.hasMisses {
			vals[2] = w.acc.misses
		}
		if w.hasLinks {
			vals[3] = w.acc.linkMissed
		}
		if !due(w.attrs, st, vals) {
			continue
		}
		addRuns(w.attrs, st, w.acc.runs, w.acc.runTimeNs)
		if w.hasMisses {
			misses.DataPoints = append(misses.DataPoints, metricdata.DataPoint[int64]{Attributes: w.attrs, StartTime: st, Time: now, Value: int64(w.acc.misses)})
		}
		if w.hasLinks {
			linkMissed.DataPoints = append(linkMissed.DataPoints, metricdata.DataPoint[int64]{Attributes: w.attrs, StartTime: st, Time: now, Value: int64(w.acc.linkMissed)})
		}
	}
	if after > 0 && len(p.sent) > len(v.programs)+len(v.links)+len(v.workloads) {
		for k, s := range p.sent {
			if s.gen != p.gen {
				delete(p.sent, k)
			}
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
