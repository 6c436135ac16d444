package exporter

import (
	"context"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// seriesProducer hands every reader the series there are thousands of —
// the per-program (program level) and per-workload (workload level)
// counters, and the memory, verified-instruction and map gauges of
// programs, keys, owners and maps — as already aggregated data, straight
// from the view. Their values the kernel (or the view) already
// aggregated: through observable instruments each value cost an Observe
// call — an attribute-set hash and a map lookup in the SDK — and each
// series a map entry, 2.8 of the 8 ms an export of 1,000 programs cost
// (make bench BENCH=agentcpu). The counters are capped by --max-programs
// alone; the gauges are held to the SDK's cardinality limit as the
// instruments are (the series over it are left out and counted in
// bpf.agent.programs.dropped, Exporter.overflow).
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
	sent map[sentKey]*sentSeries
	gen  uint64
}

// seriesBuf is what one Produce returns: 3,000 counter points at 1,000
// workload keys and as many gauges, hundreds of KB that a reused buffer
// does not make again every export.
type seriesBuf struct {
	ints   [seriesKinds][]metricdata.DataPoint[int64]
	floats [seriesKinds][]metricdata.DataPoint[float64]
	ms     []metricdata.Metrics
	sm     []metricdata.ScopeMetrics
}

// seriesKind names one of the seriesProducer's metrics: the metrics
// table's rows say which (produced).
type seriesKind int

const (
	seriesRunCount seriesKind = iota + 1
	seriesRunTime
	seriesMisses
	seriesLinkMissed
	seriesMemory // bpf.program.memory, bpf.owner.memory
	seriesInsns
	seriesMapMemory
	seriesMapEntries
	seriesMapCapacity
	seriesMapFullness
	seriesMapEvictions
	seriesMapRefused
	seriesKinds
)

// A series family is what one resend decision covers: the values that
// share one attribute set in one family go out together.
const (
	familyCounters uint8 = iota // run count, run time, misses, link misses
	familyMemory
	familyInsns // verified instructions: the counters' attribute set
	familyMap   // memory, entries, max entries, fullness of a map key
	// familyMapEvictions: a map key's evictions and refused updates,
	// counters with their own start (the probes' attach).
	familyMapEvictions
)

type sentKey struct {
	attrs  attribute.Distinct
	family uint8
}

// sentSeries is one series as a destination last got it: its values
// (noValue where absent), the start its counters count from, and when.
type sentSeries struct {
	v     [4]uint64
	start time.Time
	at    time.Time
	gen   uint64
}

// noValue stands for a value a series does not have (a program without
// recursion_misses, a key without kprobe links, a map without a count).
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

// produce is one Produce's state: where the points go and which are due.
type produce struct {
	p         *seriesProducer
	b         *seriesBuf
	now       time.Time
	after     time.Duration
	final     bool
	runsOff   bool // --stats=off: no run count or run time
	gaugeRoom int  // points each gauge may have: the cardinality limit's
}

// due says whether a series with these values goes into this export, and
// records it as sent if so. Every series goes out at its first export,
// whenever a value or its start moved, at least every resendAfter, and in
// the final export at shutdown.
func (pr *produce) due(family uint8, attrs attribute.Set, start time.Time, v [4]uint64) bool {
	if pr.after == 0 {
		return true
	}
	p := pr.p
	k := sentKey{attrs.Equivalent(), family}
	s := p.sent[k]
	if s == nil {
		s = &sentSeries{}
		p.sent[k] = s
	} else if !pr.final && s.v == v && s.start.Equal(start) && pr.now.Sub(s.at) < pr.after {
		s.gen = p.gen
		return false
	}
	*s = sentSeries{v: v, start: start, at: pr.now, gen: p.gen}
	return true
}

func (pr *produce) int(k seriesKind, attrs attribute.Set, start time.Time, v int64) {
	pr.b.ints[k] = append(pr.b.ints[k], metricdata.DataPoint[int64]{Attributes: attrs, StartTime: start, Time: pr.now, Value: v})
}

func (pr *produce) float(k seriesKind, attrs attribute.Set, start time.Time, v float64) {
	pr.b.floats[k] = append(pr.b.floats[k], metricdata.DataPoint[float64]{Attributes: attrs, StartTime: start, Time: pr.now, Value: v})
}

// counters adds one series' counters when due: v is its run count, run
// time in ns, recursion misses and link misses, noValue where it has none;
// causes the misses by cause and sets their attribute sets (causes.go).
// The misses' total decides whether the series moved: the causes are
// cumulative, so one cannot move without it.
func (pr *produce) counters(attrs attribute.Set, start time.Time, v [4]uint64, causes *agent.MissCauses, sets *causeSets) {
	if !pr.due(familyCounters, attrs, start, v) {
		return
	}
	if v[0] != noValue && !pr.runsOff {
		pr.int(seriesRunCount, attrs, start, int64(v[0]))
		pr.float(seriesRunTime, attrs, start, float64(v[1])/1e9)
	}
	if v[2] != noValue {
		for i, cause := range agent.Causes {
			if n := causes.Get(cause); emitted(i, n) {
				pr.int(seriesMisses, sets[i], start, int64(n))
			}
		}
	}
	if v[3] != noValue {
		pr.int(seriesLinkMissed, attrs, start, int64(v[3]))
	}
}

// gauges adds one family of int gauges (memory, verified instructions).
func (pr *produce) gauges(k seriesKind, family uint8, ss []valueSeries) {
	for i := range ss[:min(len(ss), pr.gaugeRoom)] {
		if pr.due(family, ss[i].attrs, time.Time{}, [4]uint64{ss[i].v, noValue, noValue, noValue}) {
			pr.int(k, ss[i].attrs, time.Time{}, int64(ss[i].v))
		}
	}
}

// maps adds the map keys' gauges.
func (pr *produce) maps(ms []mapSeries, evictionsSince time.Time) {
	for i := range ms[:min(len(ms), pr.gaugeRoom)] {
		m := &ms[i]
		vals := [4]uint64{noValue, noValue, m.capacity, noValue}
		if m.hasMemory {
			vals[0] = m.memory
		}
		if m.hasEntries {
			vals[1] = m.entries
		}
		if m.hasFullness {
			vals[3] = math.Float64bits(m.fullness)
		}
		if !pr.due(familyMap, m.attrs, time.Time{}, vals) {
			continue
		}
		if m.hasMemory {
			pr.int(seriesMapMemory, m.attrs, time.Time{}, int64(m.memory))
		}
		if m.hasEntries {
			pr.int(seriesMapEntries, m.attrs, time.Time{}, int64(m.entries))
		}
		pr.int(seriesMapCapacity, m.attrs, time.Time{}, int64(m.capacity))
		if m.hasFullness {
			pr.float(seriesMapFullness, m.attrs, time.Time{}, m.fullness)
		}
	}
	for i := range ms[:min(len(ms), pr.gaugeRoom)] {
		m := &ms[i]
		if !m.hasEvictions && !m.hasRefused {
			continue
		}
		vals := [4]uint64{noValue, noValue, noValue, noValue}
		if m.hasEvictions {
			vals[0] = m.evictions
		}
		if m.hasRefused {
			vals[1] = m.refused
		}
		if !pr.due(familyMapEvictions, m.attrs, evictionsSince, vals) {
			continue
		}
		if m.hasEvictions {
			pr.int(seriesMapEvictions, m.attrs, evictionsSince, int64(m.evictions))
		}
		if m.hasRefused {
			pr.int(seriesMapRefused, m.attrs, evictionsSince, int64(m.refused))
		}
	}
}

// opt is a value for sentSeries: v, or noValue without one.
func opt(v *uint64) uint64 {
	if v == nil {
		return noValue
	}
	return *v
}

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
	pr := produce{p: p, now: e.stamp(v), after: p.resendAfter(), final: e.stopping.Load(), gaugeRoom: math.MaxInt}
	if e.limit > 0 {
		pr.gaugeRoom = e.limit - 1 // as the SDK: the limit counts its overflow series
	}
	var b seriesBuf
	if p.reuse {
		b = p.buf
	}
	pr.b = &b
	for k := range b.ints {
		b.ints[k], b.floats[k] = b.ints[k][:0], b.floats[k][:0]
	}
	if pr.after > 0 {
		p.gen++
		if p.sent == nil {
			p.sent = map[sentKey]*sentSeries{}
		}
	}
	// A series with no start of its own counts from the exporter's start,
	// as an instrument's would; one that started after the export time
	// (a clock step) too.
	start := func(t time.Time) time.Time {
		if t.IsZero() || !t.Before(pr.now) {
			return e.started
		}
		return t
	}
	// The stats mode shapes the run metrics as runsFromView does for the
	// instruments: absent with stats off (the kernel did not count).
	// Misses are exact in every mode.
	pr.runsOff = v.stats.mode == agent.StatsOff
	for i := range v.programs {
		s := &v.programs[i]
		pr.counters(s.attrs, start(s.start), [4]uint64{s.runs, s.runTimeNs, opt(s.misses), noValue}, &s.causes, s.causeSets)
	}
	for i := range v.links {
		s := &v.links[i]
		pr.counters(s.attrs, start(s.start), [4]uint64{noValue, noValue, noValue, s.missed}, nil, nil)
	}
	linkSets := 0 // the workload keys' link-miss series, for the clean-up below
	for _, w := range v.workloads {
		vals := [4]uint64{w.acc.runs, w.acc.runTimeNs, noValue, noValue}
		if w.hasMisses {
			vals[2] = w.acc.misses
		}
		pr.counters(w.attrs, start(w.start), vals, &w.acc.causes, &w.causes)
		if w.hasLinks {
			// bpf.link.missed by reason: one series each, adding up
			// to the key's link misses.
			linkSets += len(agent.LinkMissReasons)
			for i, set := range w.linkReasonSets() {
				pr.counters(set, start(w.start), [4]uint64{noValue, noValue, noValue, w.acc.linkBy.Get(agent.LinkMissReasons[i])}, nil, nil)
			}
		}
	}
	pr.gauges(seriesMemory, familyMemory, v.memory)
	pr.gauges(seriesInsns, familyInsns, v.insns)
	pr.maps(v.maps, v.node.evictionsSince)
	if pr.after > 0 && len(p.sent) > len(v.programs)+len(v.links)+len(v.workloads)+linkSets+len(v.memory)+len(v.insns)+len(v.maps) {
		for k, s := range p.sent {
			if s.gen != p.gen {
				delete(p.sent, k)
			}
		}
	}

	ms := b.ms[:0]
	// The table's rows of the level that name a series kind, in table order.
	for _, d := range metricDefs {
		k := d.Value.series
		if k == 0 || !slices.Contains(d.Levels, e.cfg.Level) {
			continue
		}
		var data metricdata.Aggregation
		switch {
		case len(b.ints[k]) > 0 && d.Kind == kindCounter:
			data = metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: b.ints[k]}
		case len(b.floats[k]) > 0 && d.Kind == kindCounter:
			data = metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true, DataPoints: b.floats[k]}
		case len(b.ints[k]) > 0:
			data = metricdata.Gauge[int64]{DataPoints: b.ints[k]}
		case len(b.floats[k]) > 0:
			data = metricdata.Gauge[float64]{DataPoints: b.floats[k]}
		default:
			continue
		}
		ms = append(ms, metricdata.Metrics{Name: d.Name, Description: d.Description, Unit: d.Unit, Data: data})
	}
	b.ms = ms
	var sm []metricdata.ScopeMetrics
	if len(ms) > 0 {
		// The instruments' scope: the series are the same metrics, from
		// the same library, whichever way they reach the reader.
		sm = append(b.sm[:0], metricdata.ScopeMetrics{Scope: instrumentation.Scope{Name: meterName}, Metrics: ms})
		b.sm = sm
	}
	if p.reuse {
		p.buf = b
	}
	return sm, nil
}
