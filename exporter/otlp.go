package exporter

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Protocols, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

type signalSetup struct {
	readers                     []sdkmetric.Reader
	spanProcessors              []sdktrace.SpanProcessor
	metricsTarget, tracesTarget string
}

// env returns the first non-empty of the named environment variables.
func env(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// protocol picks the OTLP protocol of one signal: the flag, then the
// signal's variable, then the generic one, then the spec's default. The
// values were checked by internal/config before the exporter was built.
func protocol(flag, signal string) string {
	p := flag
	if p == "" {
		p = env("OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if p == ProtocolGRPC {
		return ProtocolGRPC
	}
	return ProtocolHTTP
}

// compression picks the OTLP compression of one signal: the config, then
// the signal's or the generic variable, then gzip (bpfleet's default, not
// the spec's none: an export of 1,000 programs shrinks about tenfold).
func compression(cfg, signal string) (string, error) {
	c := cfg
	if c == "" {
		c = env("OTEL_EXPORTER_OTLP_"+signal+"_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION")
	}
	switch c {
	case "":
		return "gzip", nil
	case "gzip", "none":
		return c, nil
	}
	return "", fmt.Errorf("OTLP compression %q: want gzip or none", c)
}

// signalEndpoint says where a signal goes: the flag's base URL, else the
// signal's or the generic OTEL variable (which the OTLP exporters read
// themselves). Empty: the operator configured no backend for it.
func signalEndpoint(flag, signal string) string {
	if flag != "" {
		return flag
	}
	return env("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
}

// signalPath joins the flag's base URL and an HTTP signal path, as the spec
// does for OTEL_EXPORTER_OTLP_ENDPOINT.
func signalPath(base, path string) string {
	return strings.TrimRight(base, "/") + path
}

// Exporter kinds, as OTEL_METRICS_EXPORTER and OTEL_TRACES_EXPORTER spell
// them (a comma-separated list; empty means otlp).
const (
	KindOTLP       = "otlp"
	KindPrometheus = "prometheus" // metrics only: served for scraping
	KindConsole    = "console"
	KindNone       = "none"
)

// exporterKinds parses the given OTEL_<SIGNAL>_EXPORTER value, else the
// variable: the set of kinds it names, otlp when unset. A kind the agent cannot do is an error, not a silent
// fallback: an operator who asked for prometheus and got nothing has no
// way to tell.
func exporterKinds(variable, given string, allowed ...string) (map[string]bool, error) {
	v := given
	if v == "" {
		v = env(variable)
	}
	if v == "" {
		v = KindOTLP
	}
	kinds := map[string]bool{}
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%s=%q: %q is not one of %s", variable, v, k, strings.Join(allowed, ", "))
		}
		kinds[k] = true
	}
	if kinds[KindNone] && len(kinds) > 1 {
		return nil, fmt.Errorf("%s=%q: none cannot be combined with other exporters", variable, v)
	}
	return kinds, nil
}

func (e *Exporter) signals(ctx context.Context) (signalSetup, error) {
	var s signalSetup
	out := e.cfg.ConsoleOut
	if out == nil {
		out = os.Stdout
	}
	// The kinds internal/config resolved win; the variables are read for
	// callers that built no config (tests).
	metricsKinds, err := exporterKinds("OTEL_METRICS_EXPORTER", e.cfg.MetricsExporter, KindOTLP, KindPrometheus, KindConsole, KindNone)
	if err != nil {
		return s, err
	}
	tracesKinds, err := exporterKinds("OTEL_TRACES_EXPORTER", e.cfg.TracesExporter, KindOTLP, KindConsole, KindNone)
	if err != nil {
		return s, err
	}
	var targets []string

	// The interval given wins over OTEL_METRIC_EXPORT_INTERVAL, so the
	// interval the agent logs is the one in use.
	readerOpts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithProducer(e.series), sdkmetric.WithProducer(e.prof)}
	if e.cfg.Interval > 0 {
		readerOpts = append(readerOpts, sdkmetric.WithInterval(e.cfg.Interval))
	}
	// pushed returns the reader of a pushing exporter: exported after the
	// Updates (push.go) when they come at a steady pace, else by the SDK's
	// periodic reader. Each pushed destination has a series producer of
	// its own, which reuses its data points from one export to the next.
	pushed := func(exp sdkmetric.Exporter) sdkmetric.Reader {
		if e.cfg.ScanInterval <= 0 {
			return sdkmetric.NewPeriodicReader(exp, readerOpts...)
		}
		if e.push == nil {
			e.push = newPusher(exportInterval(e.cfg.Interval), e.cfg.ScanInterval)
		}
		return e.push.add(exp, &seriesProducer{e: e, reuse: true}, e.prof)
	}

	if ep := signalEndpoint(e.cfg.Endpoint, "METRICS"); ep != "" && metricsKinds[KindOTLP] {
		exp, proto, err := e.metricExporter(ctx)
		if err != nil {
			return s, err
		}
		s.readers = append(s.readers, pushed(&countingMetricExporter{Exporter: exp, e: e}))
		targets = append(targets, "otlp "+proto+" "+ep)
	}
	if metricsKinds[KindPrometheus] {
		r, url, err := e.prometheusReader()
		if err != nil {
			return s, err
		}
		s.readers = append(s.readers, r)
		targets = append(targets, "prometheus "+url)
	}
	if e.cfg.Console || metricsKinds[KindConsole] {
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console metric exporter: %w", err)
		}
		s.readers = append(s.readers, pushed(exp))
		targets = append(targets, "console")
	}
	s.metricsTarget = strings.Join(targets, " ")

	if ep := signalEndpoint(e.cfg.Endpoint, "TRACES"); ep != "" && tracesKinds[KindOTLP] {
		exp, proto, err := e.spanExporter(ctx)
		if err != nil {
			return s, err
		}
		// A bounded queue (Config.SpanQueue): with the backend down, spans
		// beyond it are dropped rather than held, and counted.
		s.spanProcessors = append(s.spanProcessors, newSpanQueue(exp, e.cfg.SpanQueue, &e.spansDropped, func(err error) {
			e.traceErrs.Add(1)
			e.errs.add("exporting spans", err)
		}))
		s.tracesTarget = "otlp " + proto + " " + ep
	}
	if e.cfg.Console || tracesKinds[KindConsole] {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console span exporter: %w", err)
		}
		s.spanProcessors = append(s.spanProcessors, sdktrace.NewBatchSpanProcessor(exp))
		s.tracesTarget = strings.TrimSpace(s.tracesTarget + " console")
	}
	return s, nil
}

// Defaults of OTEL_EXPORTER_PROMETHEUS_HOST and _PORT, as the spec has them.
const (
	DefaultPrometheusHost = "localhost"
	DefaultPrometheusPort = 9464
)

// prometheusReader serves the metrics for scraping at
// http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics.
// Scrapes read the latest snapshot like the periodic readers do, so a
// scrape never waits for a kernel scan. The listener is bound here so a
// taken port stops the agent at start with one line, not later.
func (e *Exporter) prometheusReader() (sdkmetric.Reader, string, error) {
	host := env("OTEL_EXPORTER_PROMETHEUS_HOST")
	if host == "" {
		host = DefaultPrometheusHost
	}
	port := strconv.Itoa(DefaultPrometheusPort)
	if p := env("OTEL_EXPORTER_PROMETHEUS_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return nil, "", fmt.Errorf("OTEL_EXPORTER_PROMETHEUS_PORT=%q: want a port number", p)
		}
		port = p
	}
	reg := prometheus.NewRegistry()
	// The same names Prometheus' OTLP receiver gives the metrics (units and
	// _total as suffixes), so METRICS.md, the rules and the dashboards hold
	// for both ways of collecting.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithProducer(e.series), otelprom.WithProducer(e.prof))
	if err != nil {
		return nil, "", fmt.Errorf("creating Prometheus exporter: %w", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, "", fmt.Errorf("serving Prometheus metrics (OTEL_EXPORTER_PROMETHEUS_HOST/PORT): %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	e.promServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.promServer.Serve(l) }()
	e.PrometheusAddr = l.Addr().String()
	return exp, "http://" + e.PrometheusAddr + "/metrics", nil
}

func (e *Exporter) metricExporter(ctx context.Context) (sdkmetric.Exporter, string, error) {
	proto := protocol(e.cfg.Protocol, "METRICS")
	// Cumulative whatever OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE
	// says: the values are the kernel's cumulative counters, and Prometheus'
	// OTLP receiver accepts only cumulative sums.
	cumulative := sdkmetric.DefaultTemporalitySelector
	comp, err := compression(e.cfg.Compression, "METRICS")
	if err != nil {
		return nil, "", err
	}
	var exp sdkmetric.Exporter
	if proto == ProtocolGRPC {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithTemporalitySelector(cumulative)}
		if comp == "gzip" {
			opts = append(opts, otlpmetricgrpc.WithCompressor("gzip"))
		}
		if e.cfg.Endpoint != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(e.cfg.Endpoint))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		// http/protobuf: bpfleet's own encoder (otlpwire.go), which keeps
		// each series' encoding between exports.
		var wc wireConfig
		if wc, err = resolveWireConfig(e.cfg.Endpoint, comp); err == nil {
			exp = newWireExporter(wc)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("creating OTLP %s metric exporter: %w", proto, err)
	}
	return exp, proto, nil
}

func (e *Exporter) spanExporter(ctx context.Context) (sdktrace.SpanExporter, string, error) {
	proto := protocol(e.cfg.Protocol, "TRACES")
	comp, err := compression(e.cfg.Compression, "TRACES")
	if err != nil {
		return nil, "", err
	}
	var exp sdktrace.SpanExporter
	if proto == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if comp == "gzip" {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		if e.cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(e.cfg.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		opts := []otlptracehttp.Option{otlptracehttp.WithCompression(otlptracehttp.NoCompression)}
		if comp == "gzip" {
			opts[0] = otlptracehttp.WithCompression(otlptracehttp.GzipCompression)
		}
		if e.cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(signalPath(e.cfg.Endpoint, "/v1/traces")))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, "", fmt.Errorf("creating OTLP %s span exporter: %w", proto, err)
	}
	return exp, proto, nil
}

// countingMetricExporter counts failed exports for bpf.agent.export.errors
// and the once-per-interval log line.
type countingMetricExporter struct {
	sdkmetric.Exporter
	e *Exporter
}

func (c *countingMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	stampStarts(rm)
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		c.e.metricErrs.Add(1)
		c.e.errs.add("exporting metrics", err)
	}
	return err
}

// ForceFlush counts too: the wire exporter reports a request's failed
// answer when it reads it, at the next export or here.
func (c *countingMetricExporter) ForceFlush(ctx context.Context) error {
	err := c.Exporter.ForceFlush(ctx)
	if err != nil {
		c.e.metricErrs.Add(1)
		c.e.errs.add("exporting metrics", err)
	}
	return err
}
