// Package exporter maps the agent's snapshots to OpenTelemetry: cumulative
// metrics read by asynchronous instruments from the latest snapshot, and one
// span per miss episode. Where they go, OTLP (gRPC or HTTP), Prometheus
// scrapes or the console, is Config.OTel: the flags and OTEL_* variables
// as internal/config resolved them. The exporter reads no environment.
package exporter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter/otlp"
	"github.com/bpfleet/bpfleet/internal/config"
)

// meterName is the instrumentation scope of bpfleet's metrics.
const meterName = "github.com/bpfleet/bpfleet/exporter"

// Config configures an Exporter. The zero value exports nothing but is valid.
type Config struct {
	// Level is the metrics detail (--metrics-level).
	Level Level
	// MaxPrograms caps the programs exported at LevelProgram and the
	// workload keys at LevelWorkload, and sets the SDK's cardinality limit
	// (see cardinalityLimit); 0: no cap, no limit.
	MaxPrograms int
	// Interval is the metric export interval; 0: OTel.MetricExportInterval
	// (OTEL_METRIC_EXPORT_INTERVAL), else the SDK default (60s).
	Interval time.Duration
	// ScanInterval is how often Update is called (the agent's
	// --interval); 0: not at a steady pace. With it the OTLP and console
	// metrics are exported right after an Update (push.go), the first
	// Update and then the first at least Interval after the previous
	// export (less half a scan interval): never more often than the scans
	// change the data. Without it the SDK's periodic reader exports every
	// Interval.
	ScanInterval time.Duration
	// ResendUnchanged is how often a pushed destination (OTLP, console)
	// is sent a produced series (series.go: the program and workload
	// counters, the memory, verified-instruction and map gauges) whose
	// values did not move since it last got it (--resend-unchanged):
	// every series goes out whenever it moves, and at least this often,
	// so that idle programs cost an export a third of the points at the
	// agent's 30 s against 10 s exports while a backend's rate() over a
	// minute still has two points of each. 0, or no more than the export
	// interval: every series in every export. Scraped readers get every
	// series.
	ResendUnchanged time.Duration
	// ProgramInfo adds bpf.program.info at LevelWorkload: one series per
	// loaded program, so new series with every reload.
	ProgramInfo bool
	// SpanBudget is the most episode spans (open and closed) emitted per
	// minute; the rest are counted in bpf.agent.spans.dropped. 0: no cap.
	SpanBudget int

	// Kernel describes the node for the resource (os.version, host.arch,
	// host.cpu.model.name); take it from the first snapshot.
	Kernel agent.KernelInfo
	// NodeName is k8s.node.name (internal/config reads K8S_NODE_NAME),
	// and the instance id; empty: the host name stands in.
	NodeName string
	// ClusterName is k8s.cluster.name, omitted when empty.
	ClusterName string
	// NodePool is k8s.nodepool.name (the agent reads it from its Node's
	// labels), omitted when empty; OTEL_RESOURCE_ATTRIBUTES' wins.
	NodePool string

	// OTel is where metrics and spans go and how: the OTEL_* variables and
	// --otlp-* flags as internal/config resolved and checked them (one
	// resolution: the exporter reads no environment, and passes every
	// setting to the SDK's exporters as options). Its zero value exports
	// nothing over OTLP (no endpoint); zero fields of a signal take the
	// defaults config would give: otlp, http/protobuf, gzip, a 10 s
	// timeout. OTel.SpanQueue bounds the spans waiting for the OTLP span
	// exporter (zero fields: the OTEL_BSP_* defaults); spans it cannot
	// hold or send are counted in bpf.agent.spans.dropped too.
	OTel config.OTel
	// Console adds exporters that print metrics and spans to ConsoleOut.
	Console    bool
	ConsoleOut io.Writer

	// Log receives the exporter's messages; nil: slog.Default().
	Log *slog.Logger

	// Clock is the time every point, start time, span budget and resend
	// decision is stamped with; nil: time.Now. A replay or a simulator
	// sets it to stamp an hour of history in seconds (test/fleetsim): the
	// SDK's own instruments stamp the wall clock, so with a Clock the
	// OTLP export restamps their points too (restamp). With a Clock the
	// points carry its time at the latest Update (stamp).
	Clock func() time.Time

	// Readers and SpanProcessors are added to the OTLP ones: an in-process
	// consumer (tests use the SDK's ManualReader and span recorder). A
	// reader sees the program and workload counters only with the
	// exporter's producers (Producers).
	Readers        []sdkmetric.Reader
	SpanProcessors []sdktrace.SpanProcessor
}

// Exporter turns snapshots into metrics and spans. Update and EndEpisodes
// never block on the backend: metrics are pulled by the SDK's periodic
// reader, spans go through a bounded batch queue.
type Exporter struct {
	cfg Config
	log *slog.Logger

	mp           *sdkmetric.MeterProvider
	tp           *sdktrace.TracerProvider // nil when no span consumer is configured
	tracer       trace.Tracer
	registration metric.Registration
	scanDuration metric.Float64Histogram

	mu        sync.Mutex
	view      *view
	prof      *profileProducer
	series    *seriesProducer
	push      *pusher // nil: no pushed metric destination (see Config.ScanInterval)
	progCache map[uint32]cachedAttrs
	owners    map[string]*aggSeries
	maps      mapState
	attach    map[string]*aggSeries
	workloads map[workloadKey]*workloadSeries
	// byRank is every workload series, in the order of the last sort
	// over the cap (then by creation): the next sort finds it nearly
	// sorted, and no Update walks the map.
	byRank   []*workloadSeries
	progLast map[uint32]*programLast
	gen      uint64 // Updates so far: marks the programs each one saw
	keySeq   uint64 // workload keys created so far
	// keysMoved says the last buildWorkloads met a program it had not
	// seen, one under another key, or a program set of another size: the
	// keys' memory (which counters do not change) may have moved.
	// progsLast is that size.
	keysMoved bool
	progsLast int
	spans     spanState
	scans     int64
	// scanErrors counts unreadable objects and failed scans.
	scanErrors int64

	metricErrs, traceErrs atomic.Int64
	// metricFailStreak counts the metric exports that failed in a row
	// (0 after any that succeeded), metricLastErr the latest failure's
	// text: the agent's readiness rule (ExportFailing).
	metricFailStreak atomic.Int64
	metricLastErr    atomic.Pointer[string]
	errs             errorLog
	// overflowed is how many series the cardinality limit left out or
	// folded into otel.metric.overflow at the latest collection.
	overflowed   atomic.Int64
	spansDropped atomic.Int64
	stopping     atomic.Bool
	limit        int
	// started is when the exporter began: workload counters count from it.
	started time.Time

	// Where metrics and spans go, for the agent's start-up line.
	MetricsTarget, TracesTarget string
	// PrometheusAddr is where the Prometheus exporter listens
	// (OTEL_METRICS_EXPORTER=prometheus), else empty.
	PrometheusAddr string
	promServer     *http.Server
}

// New sets up the OpenTelemetry SDK: resource, exporters and readers from
// cfg.OTel, instruments from the metrics table. cfg is taken as valid:
// internal/config checks the agent's settings before anything starts.
func New(ctx context.Context, cfg Config) (*Exporter, error) {
	e := &Exporter{
		cfg:       cfg,
		log:       cfg.Log,
		progCache: map[uint32]cachedAttrs{},
		maps:      mapState{keys: map[mapKey]*mapKeyState{}, groups: map[uint32]*programGroup{}},
		owners:    map[string]*aggSeries{},
		attach:    map[string]*aggSeries{},
		workloads: map[workloadKey]*workloadSeries{},
		progLast:  map[uint32]*programLast{},
		spans:     newSpanState(),
		limit:     cardinalityLimit(cfg.MaxPrograms),
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.started = e.now()
	e.prof = &profileProducer{e: e}
	e.series = &seriesProducer{e: e}
	res, dropped, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(dropped) > 0 {
		e.log.Warn("resource attributes naming the agent's pod left out: every rollout would start new series wherever resource attributes are labels; the resource names the node (k8s.node.name, host.name)", "dropped", dropped)
	}
	sig, err := e.signals(ctx)
	if err != nil {
		e.closePrometheus(ctx)
		return nil, err
	}

	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithCardinalityLimit(e.limit), sdkmetric.WithExemplarFilter(exemplarFilter(cfg.OTel.ExemplarFilter))}
	for _, r := range append(sig.readers, cfg.Readers...) {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	e.mp = sdkmetric.NewMeterProvider(mopts...)
	if err := e.registerInstruments(e.mp.Meter(meterName)); err != nil {
		_ = e.mp.Shutdown(ctx)
		e.closePrometheus(ctx)
		return nil, err
	}

	procs := append(sig.spanProcessors, cfg.SpanProcessors...)
	if len(procs) > 0 {
		// The sampler and span limits given, as config resolved them:
		// the provider reads the variables only for what it is not given.
		topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler(cfg.OTel.Sampler, cfg.OTel.SamplerArg)),
			sdktrace.WithRawSpanLimits(spanLimits(cfg.OTel.SpanLimits))}
		for _, p := range procs {
			topts = append(topts, sdktrace.WithSpanProcessor(p))
		}
		e.tp = sdktrace.NewTracerProvider(topts...)
		e.tracer = e.tp.Tracer("github.com/bpfleet/bpfleet/exporter")
	} else {
		e.tracer = noop.NewTracerProvider().Tracer("")
	}
	e.MetricsTarget, e.TracesTarget = sig.metricsTarget, sig.tracesTarget
	if e.push != nil {
		e.push.start()
	}
	return e, nil
}

// Update makes snap the snapshot the next metric collection reads and emits
// a span for every episode that closed in it. It never blocks on export.
func (e *Exporter) Update(ctx context.Context, snap *agent.Snapshot) {
	e.mu.Lock()
	e.scans++
	e.scanErrors += int64(snap.Scan.Errors)
	if snap.MapScan.Error != "" {
		// The maps were not read: their series are absent, not zero,
		// and this is where the loss is counted.
		e.scanErrors++
	}
	now := e.now()
	e.view = e.buildView(snap, now)
	e.view.at = now
	e.mu.Unlock()
	if e.push != nil {
		e.push.updated(now)
	}

	if e.scanDuration != nil {
		e.scanDuration.Record(ctx, snap.Scan.Duration.Seconds())
	}
	e.spans.owners(snap)
	for i := range snap.Episodes {
		if snap.Episodes[i].Open {
			e.episodeOpened(ctx, &snap.Episodes[i])
		} else {
			e.episodeSpan(ctx, &snap.Episodes[i], false)
		}
	}
}

// Producers returns the producers a reader given in Config.Readers needs
// to see every metric: the program and workload counters and the
// profiles do not go through instruments. They forward to e, so a reader
// can be built with them before New: pass a *Exporter variable's address
// and set it after New.
func Producers(e **Exporter) []sdkmetric.Producer {
	return []sdkmetric.Producer{lateProducer{e}}
}

// lateProducer produces e's series and profiles once *e is set.
type lateProducer struct{ e **Exporter }

func (l lateProducer) Produce(ctx context.Context) ([]metricdata.ScopeMetrics, error) {
	e := *l.e
	if e == nil {
		return nil, nil
	}
	sm, err := e.series.Produce(ctx)
	if err != nil {
		return nil, err
	}
	prof, err := e.prof.Produce(ctx)
	return append(sm, prof...), err
}

// sampler is OTEL_TRACES_SAMPLER's sampler with its ratio, as the SDK
// makes it; unset: the SDK's default, parentbased_always_on.
func sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// spanLimits are the SDK's limits of l; a zero l (a Config built by hand)
// has the defaults.
func spanLimits(l config.SpanLimits) sdktrace.SpanLimits {
	if l == (config.SpanLimits{}) {
		l = config.DefaultSpanLimits
	}
	return sdktrace.SpanLimits{
		AttributeValueLengthLimit:   l.AttributeValueLength,
		AttributeValueDepthLimit:    sdktrace.DefaultAttributeValueDepthLimit,
		AttributeCountLimit:         l.AttributeCount,
		EventCountLimit:             l.EventCount,
		LinkCountLimit:              l.LinkCount,
		AttributePerEventCountLimit: l.AttributesPerEvent,
		AttributePerLinkCountLimit:  l.AttributesPerLink,
	}
}

// exemplarFilter is OTEL_METRICS_EXEMPLAR_FILTER's filter; unset: none.
// No exemplars unless asked for: every instrument but the scan duration
// is observed in a callback, with no trace to point to, yet the SDK's
// default (trace-based) filter made each collection allocate an exemplar
// slice per data point.
func exemplarFilter(v string) exemplar.Filter {
	switch v {
	case "always_on":
		return exemplar.AlwaysOnFilter
	case "trace_based":
		return exemplar.TraceBasedFilter
	}
	return exemplar.AlwaysOffFilter
}

// cardinalityLimit is the SDK's per-instrument series limit for a
// --max-programs cap: room for the capped program series, one kprobe link
// each and the attach types. The exporter's own cap bites first; the SDK's
// is the backstop, and what it folds into otel.metric.overflow is counted
// in bpf.agent.programs.dropped and logged. 0 (no cap) is no limit, never
// the SDK's silent default of 2,000.
func cardinalityLimit(maxPrograms int) int {
	if maxPrograms <= 0 {
		return 0
	}
	return 2*maxPrograms + 64
}

// ScanFailed counts a scan that returned an error (the agent keeps going).
func (e *Exporter) ScanFailed(err error) {
	e.mu.Lock()
	e.scanErrors++
	if e.view != nil {
		v := *e.view
		v.scanErrors = e.scanErrors
		e.view = &v
	}
	e.mu.Unlock()
	e.errs.add("scan", err)
	if e.push != nil {
		e.push.updated(e.now())
	}
}

// EndEpisodes emits the spans of the episodes still open when the agent
// stopped (agent.Scanner.Close returns them), flagged as ended by shutdown.
func (e *Exporter) EndEpisodes(ctx context.Context, eps []agent.Episode) {
	for i := range eps {
		e.episodeSpan(ctx, &eps[i], true)
	}
}

// now is the exporter's clock (Config.Clock).
func (e *Exporter) now() time.Time {
	if e.cfg.Clock != nil {
		return e.cfg.Clock()
	}
	return time.Now()
}

// stamp is the time a collection of v is stamped with: now, or with a
// Clock the clock's time at the Update that built v. A simulated clock
// moves in steps: an export started by one Update (push.go) may run after
// the clock's next step, and must not stamp the older scan's values with
// the newer time, which a store holds against the newer values at that
// time (Prometheus refuses the second as a duplicate).
func (e *Exporter) stamp(v *view) time.Time {
	if e.cfg.Clock != nil && v != nil && !v.at.IsZero() {
		return v.at
	}
	return e.now()
}

func (e *Exporter) latest() *view {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.view
}

// ExportErrors returns the failed metric and trace exports so far.
func (e *Exporter) ExportErrors() (metrics, traces int64) {
	return e.metricErrs.Load(), e.traceErrs.Load()
}

// ExportFailing returns how many metric exports in a row have failed (0
// once one succeeds, and always 0 when metrics are not pushed: scraped,
// or no endpoint) and the latest failure. The agent is not ready while it
// reaches config.ReadyExportFailures.
func (e *Exporter) ExportFailing() (streak int64, last string) {
	if p := e.metricLastErr.Load(); p != nil {
		last = *p
	}
	return e.metricFailStreak.Load(), last
}

// metricExported records one metric export's outcome for ExportFailing.
func (e *Exporter) metricExported(err error) {
	if err == nil {
		e.metricFailStreak.Store(0)
		return
	}
	msg := err.Error()
	e.metricLastErr.Store(&msg)
	e.metricFailStreak.Add(1)
}

// SpansDropped returns the episode spans dropped so far: over the span
// budget, refused by a full export queue, or in a batch the backend did
// not take (bpf.agent.spans.dropped).
func (e *Exporter) SpansDropped() int64 { return e.spansDropped.Load() }

// LogErrors logs, in one line, the errors since the previous call: the
// agent calls it once per interval so a dead backend is said once per
// interval, not once per failed request.
func (e *Exporter) LogErrors() {
	if n, last := e.errs.take(); last != "" {
		e.log.Warn("telemetry errors since last interval", "failures", n, "last", last)
	}
	if n := e.overflowed.Load(); n > 0 {
		e.log.Warn("series over the cardinality limit left out or folded into otel.metric.overflow (counted in bpf.agent.programs.dropped): lower --max-programs or the metrics level", "series", n, "limit", e.limit)
	}
	if n := e.spansDropped.Load(); n > e.spans.reported.Load() {
		e.spans.reported.Store(n)
		e.log.Warn("episode spans dropped: over the span budget, the export queue full or the backend down (counted in bpf.agent.spans.dropped)", "dropped_total", n, "budget_per_minute", e.cfg.SpanBudget, "queue", otlp.SpanQueueDefaults(e.cfg.OTel.SpanQueue).Size)
	}
}

// HandleError takes the OpenTelemetry SDK's internal errors (pass it to
// otel.SetErrorHandler) into the once-per-interval log line.
// They repeat what the counted export failures already say, so they set
// the line's message without adding to its count.
func (e *Exporter) HandleError(err error) { e.errs.note("otel", err) }

// Shutdown exports what is pending (the last snapshot's metrics, queued
// spans) and stops the SDK.
func (e *Exporter) Shutdown(ctx context.Context) error {
	var errs []error
	// Spans first: the metric shutdown may wait out a dead backend's
	// timeout and spans carry the more precious episodes.
	if e.tp != nil {
		errs = append(errs, e.tp.Shutdown(ctx))
	}
	// The pusher's last export, and the meter provider's shutdown for the
	// periodic readers, run a last collection, through the still
	// registered callback, and export it: with bpf.agent.shutdown 1, so
	// the rules know the agent left on purpose.
	e.stopping.Store(true)
	if e.push != nil {
		errs = append(errs, e.push.stop(ctx))
	}
	errs = append(errs, e.mp.Shutdown(ctx))
	e.closePrometheus(ctx)
	return errors.Join(errs...)
}

// closePrometheus stops serving scrapes (OTEL_METRICS_EXPORTER=prometheus).
func (e *Exporter) closePrometheus(ctx context.Context) {
	if e.promServer != nil {
		_ = e.promServer.Shutdown(ctx)
	}
}

// ForceFlush exports the current metrics and queued spans now.
func (e *Exporter) ForceFlush(ctx context.Context) error {
	var errs []error
	if e.tp != nil {
		errs = append(errs, e.tp.ForceFlush(ctx))
	}
	if e.push != nil {
		errs = append(errs, e.push.export(ctx, true))
	}
	errs = append(errs, e.mp.ForceFlush(ctx))
	return errors.Join(errs...)
}

// errorLog collects errors between two LogErrors calls.
type errorLog struct {
	mu   sync.Mutex
	n    int
	last string
}

func (l *errorLog) add(what string, err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.n++
	l.last = what + ": " + err.Error()
	l.mu.Unlock()
}

func (l *errorLog) note(what string, err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	l.last = what + ": " + err.Error()
	l.mu.Unlock()
}

func (l *errorLog) take() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, last := l.n, l.last
	l.n, l.last = 0, ""
	return n, last
}
