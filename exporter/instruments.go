package exporter

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// sink receives one observed value of one instrument.
type sink interface {
	Int(v int64, attrs attribute.Set)
	Float(v float64, attrs attribute.Set)
}

var empty = attribute.NewSet()

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// overflow is how many series of the view's largest set are over the
// cardinality limit, and remembers it for the interval's log line: an
// instrument's the SDK folds into otel.metric.overflow (the limit counts
// that series too), the produced gauges' the series producer leaves out
// at the same limit. The program and workload counters (series.go) are
// capped by --max-programs alone.
func (e *Exporter) overflow(v *view) int64 {
	n := max(len(v.info), len(v.owners), len(v.attach), len(v.maps), len(v.memory), len(v.insns))
	over := 0
	if e.limit > 0 && n > e.limit-1 {
		over = n - (e.limit - 1)
	}
	e.overflowed.Store(int64(over))
	return int64(over)
}

// aggInt observes one value of each of a view's aggregates.
func aggInt(series func(*view) []aggSeries, val func(*aggSeries) uint64) func(*view, sink) {
	return func(v *view, s sink) {
		ss := series(v)
		for i := range ss {
			s.Int(int64(val(&ss[i])), ss[i].attrs)
		}
	}
}

// aggSeconds observes the run time of each of a view's aggregates.
func aggSeconds(series func(*view) []aggSeries) func(*view, sink) {
	return func(v *view, s sink) {
		ss := series(v)
		for i := range ss {
			s.Float(float64(ss[i].acc.runTimeNs)/1e9, ss[i].attrs)
		}
	}
}

// The aggregates of a view and their values, for aggInt.
func ownerSeries(v *view) []aggSeries   { return v.owners }
func attachSeries(v *view) []aggSeries  { return v.attach }
func accRuns(a *aggSeries) uint64       { return a.acc.runs }
func accLinkMissed(a *aggSeries) uint64 { return a.acc.linkMissed }
func programCount(a *aggSeries) uint64  { return uint64(a.programs) }

type observerSink struct {
	o metric.Observer
	i metric.Int64Observable
	f metric.Float64Observable
}

func (s observerSink) Int(v int64, attrs attribute.Set) {
	s.o.ObserveInt64(s.i, v, metric.WithAttributeSet(attrs))
}

func (s observerSink) Float(v float64, attrs attribute.Set) {
	s.o.ObserveFloat64(s.f, v, metric.WithAttributeSet(attrs))
}

type registered struct {
	src source
	i   metric.Int64Observable
	f   metric.Float64Observable
}

// registerInstruments creates the instruments of the configured level from
// metricDefs and one callback that observes all of them: from the latest
// view, or from the exporter's own counters. The rows the producers make
// (series.go, profile.go) have no instrument.
func (e *Exporter) registerInstruments(m metric.Meter) error {
	var regs []registered
	var all []metric.Observable
	for _, d := range metricDefs {
		if !slices.Contains(d.Levels, e.cfg.Level) || d.Value.series != 0 || d.Value.profile {
			continue
		}
		var err error
		r := registered{src: d.Value}
		switch {
		case d.Value.scan:
			e.scanDuration, err = m.Float64Histogram(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description),
				metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
		case d.Kind == kindCounter && d.Float:
			r.f, err = m.Float64ObservableCounter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Kind == kindCounter:
			r.i, err = m.Int64ObservableCounter(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		case d.Float:
			r.f, err = m.Float64ObservableGauge(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		default:
			r.i, err = m.Int64ObservableGauge(d.Name, metric.WithUnit(d.Unit), metric.WithDescription(d.Description))
		}
		if err != nil {
			return fmt.Errorf("creating instrument %s: %w", d.Name, err)
		}
		if d.Value.scan {
			continue
		}
		if r.i != nil {
			all = append(all, r.i)
		} else {
			all = append(all, r.f)
		}
		regs = append(regs, r)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		latest := e.latest()
		var v view
		if latest != nil {
			// The counters that move between scans join a copy of the view.
			v = *latest
			v.spansDropped = e.spansDropped.Load()
			v.shutdown = e.stopping.Load()
			v.overflowed = e.overflow(&v)
		}
		for _, r := range regs {
			s := observerSink{o: o, i: r.i, f: r.f}
			switch {
			case r.src.counted != nil:
				r.src.counted(e, s)
			case latest != nil:
				r.src.observe(&v, s)
			}
		}
		return nil
	}, all...)
	if err != nil {
		return fmt.Errorf("registering metric callback: %w", err)
	}
	e.registration = reg
	return nil
}

var (
	signalMetrics = attribute.NewSet(attribute.String(attrSignal, "metrics"))
	signalTraces  = attribute.NewSet(attribute.String(attrSignal, "traces"))
)
