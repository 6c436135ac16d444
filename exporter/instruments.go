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

// observers read each table metric out of a view. Every observable metric
// of metricDefs has one (a test checks).
var observers = map[string]func(v *view, s sink){
	// The program metrics (bpf.program.run.count, .run.time,
	// .recursion_misses, bpf.link.missed) come from series.go's producer.
	"bpf.program.info": func(v *view, s sink) {
		for _, a := range v.info {
			s.Int(1, a)
		}
	},
	"bpf.owner.run.count":        aggInt(func(v *view) []aggSeries { return v.owners }, func(a *aggSeries) uint64 { return a.acc.runs }),
	"bpf.owner.run.time":         aggSeconds(func(v *view) []aggSeries { return v.owners }),
	"bpf.owner.recursion_misses": aggInt(func(v *view) []aggSeries { return v.owners }, func(a *aggSeries) uint64 { return a.acc.misses }),
	"bpf.owner.programs":         aggInt(func(v *view) []aggSeries { return v.owners }, func(a *aggSeries) uint64 { return uint64(a.programs) }),

	"bpf.attach_type.run.count":        aggInt(func(v *view) []aggSeries { return v.attach }, func(a *aggSeries) uint64 { return a.acc.runs }),
	"bpf.attach_type.run.time":         aggSeconds(func(v *view) []aggSeries { return v.attach }),
	"bpf.attach_type.recursion_misses": aggInt(func(v *view) []aggSeries { return v.attach }, func(a *aggSeries) uint64 { return a.acc.misses }),
	"bpf.attach_type.link.missed":      aggInt(func(v *view) []aggSeries { return v.attach }, func(a *aggSeries) uint64 { return a.acc.linkMissed }),
	"bpf.attach_type.programs":         aggInt(func(v *view) []aggSeries { return v.attach }, func(a *aggSeries) uint64 { return uint64(a.programs) }),
	"bpf.attach_type.overhead": func(v *view, s sink) {
		for i := range v.attach {
			if o := v.attach[i].overhead; o != nil {
				s.Float(*o, v.attach[i].attrs)
			}
		}
	},

	"bpf.agent.scans":            func(v *view, s sink) { s.Int(v.scans, empty) },
	"bpf.agent.scan.source":      func(v *view, s sink) { s.Int(1, v.scanSource) },
	"bpf.agent.programs":         func(v *view, s sink) { s.Int(int64(v.programsSeen), empty) },
	"bpf.agent.links":            func(v *view, s sink) { s.Int(int64(v.linksSeen), empty) },
	"bpf.agent.scan.errors":      func(v *view, s sink) { s.Int(v.scanErrors, empty) },
	"bpf.agent.stats.enabled":    func(v *view, s sink) { s.Int(b2i(v.statsEnabled), empty) },
	"bpf.agent.stats.held":       func(v *view, s sink) { s.Int(b2i(v.statsHeld), empty) },
	"bpf.agent.programs.dropped": func(v *view, s sink) { s.Int(int64(v.dropped)+v.overflowed, empty) },
	"bpf.agent.spans.dropped":    func(v *view, s sink) { s.Int(v.spansDropped, empty) },
	"bpf.agent.shutdown":         func(v *view, s sink) { s.Int(b2i(v.shutdown), empty) },
	// bpf.agent.export.errors is observed from the exporter's counters, not
	// the view: see registerInstruments.
}

// overflow is how many series of the view's largest instrument the SDK's
// cardinality limit folds into otel.metric.overflow (the limit counts that
// series too), and remembers it for the interval's log line. The program
// and workload counters are produced (series.go), capped by --max-programs
// alone.
func (e *Exporter) overflow(v *view) int64 {
	n := max(len(v.info), len(v.owners), len(v.attach))
	over := 0
	if e.limit > 0 && n > e.limit-1 {
		over = n - (e.limit - 1)
	}
	e.overflowed.Store(int64(over))
	return int64(over)
}

func aggInt(series func(*view) []aggSeries, val func(*aggSeries) uint64) func(*view, sink) {
	return func(v *view, s sink) {
		ss := series(v)
		for i := range ss {
			s.Int(int64(val(&ss[i])), ss[i].attrs)
		}
	}
}

func aggSeconds(series func(*view) []aggSeries) func(*view, sink) {
	return func(v *view, s sink) {
		ss := series(v)
		for i := range ss {
			s.Float(float64(ss[i].acc.runTimeNs)/1e9, ss[i].attrs)
		}
	}
}

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
	name    string
	observe func(*view, sink)
	i       metric.Int64Observable
	f       metric.Float64Observable
}

// registerInstruments creates the instruments of the configured level from
// metricDefs and one callback that reads the latest view for all of them.
func (e *Exporter) registerInstruments(m metric.Meter) error {
	var regs []registered
	var all []metric.Observable
	var exportErrs metric.Int64Observable
	for _, d := range metricDefs {
		// profileMetric: profile.go's producer; the program and workload
		// counters: series.go's.
		if !slices.Contains(d.Levels, e.cfg.Level) || d.Name == profileMetric || producedMetric(d.Name, e.cfg.Level) {
			continue
		}
		var err error
		r := registered{name: d.Name, observe: observers[d.Name]}
		switch {
		case d.Kind == kindHistogram:
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
		if d.Name == "bpf.agent.export.errors" {
			exportErrs = r.i
		}
		if d.Kind == kindHistogram {
			continue
		}
		if r.i != nil {
			all = append(all, r.i)
		} else {
			all = append(all, r.f)
		}
		if r.observe != nil {
			regs = append(regs, r)
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if latest := e.latest(); latest != nil {
			// The counters that move between scans join a copy of the view.
			v := *latest
			v.spansDropped = e.spansDropped.Load()
			v.shutdown = e.stopping.Load()
			v.overflowed = e.overflow(&v)
			for _, r := range regs {
				r.observe(&v, observerSink{o: o, i: r.i, f: r.f})
			}
		}
		if exportErrs != nil {
			o.ObserveInt64(exportErrs, e.metricErrs.Load(), metric.WithAttributeSet(signalMetrics))
			o.ObserveInt64(exportErrs, e.traceErrs.Load(), metric.WithAttributeSet(signalTraces))
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
	signalMetrics = attribute.NewSet(attribute.String("signal", "metrics"))
	signalTraces  = attribute.NewSet(attribute.String("signal", "traces"))
)
