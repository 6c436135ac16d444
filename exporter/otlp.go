package exporter

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
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

func (e *Exporter) signals(ctx context.Context) (signalSetup, error) {
	var s signalSetup
	out := e.cfg.ConsoleOut
	if out == nil {
		out = os.Stdout
	}
	metricsKind := e.cfg.MetricsExporter
	if metricsKind == "" {
		metricsKind = env("OTEL_METRICS_EXPORTER")
	}
	tracesKind := e.cfg.TracesExporter
	if tracesKind == "" {
		tracesKind = env("OTEL_TRACES_EXPORTER")
	}

	// The interval given wins over OTEL_METRIC_EXPORT_INTERVAL, so the
	// interval the agent logs is the one in use.
	readerOpts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithProducer(e.prof)}
	if e.cfg.Interval > 0 {
		readerOpts = append(readerOpts, sdkmetric.WithInterval(e.cfg.Interval))
	}

	if ep := signalEndpoint(e.cfg.Endpoint, "METRICS"); ep != "" && metricsKind != "none" && metricsKind != "console" {
		exp, proto, err := e.metricExporter(ctx)
		if err != nil {
			return s, err
		}
		s.readers = append(s.readers, sdkmetric.NewPeriodicReader(&countingMetricExporter{Exporter: exp, e: e}, readerOpts...))
		s.metricsTarget = "otlp " + proto + " " + ep
	}
	if e.cfg.Console || metricsKind == "console" {
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console metric exporter: %w", err)
		}
		s.readers = append(s.readers, sdkmetric.NewPeriodicReader(exp, readerOpts...))
		s.metricsTarget = strings.TrimSpace(s.metricsTarget + " console")
	}

	if ep := signalEndpoint(e.cfg.Endpoint, "TRACES"); ep != "" && tracesKind != "none" && tracesKind != "console" {
		exp, proto, err := e.spanExporter(ctx)
		if err != nil {
			return s, err
		}
		// The batch processor's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE,
		// 2048): with the backend down, spans beyond it are dropped rather
		// than held.
		s.spanProcessors = append(s.spanProcessors, sdktrace.NewBatchSpanProcessor(&countingSpanExporter{SpanExporter: exp, e: e}))
		s.tracesTarget = "otlp " + proto + " " + ep
	}
	if e.cfg.Console || tracesKind == "console" {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console span exporter: %w", err)
		}
		s.spanProcessors = append(s.spanProcessors, sdktrace.NewBatchSpanProcessor(exp))
		s.tracesTarget = strings.TrimSpace(s.tracesTarget + " console")
	}
	return s, nil
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
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithTemporalitySelector(cumulative)}
		if comp == "gzip" {
			opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
		} else {
			opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.NoCompression))
		}
		if e.cfg.Endpoint != "" {
			opts = append(opts, otlpmetrichttp.WithEndpointURL(signalPath(e.cfg.Endpoint, "/v1/metrics")))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
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
	stampStarts(rm, c.e.latest())
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		c.e.metricErrs.Add(1)
		c.e.errs.add("exporting metrics", err)
	}
	return err
}

type countingSpanExporter struct {
	sdktrace.SpanExporter
	e *Exporter
}

func (c *countingSpanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		c.e.traceErrs.Add(1)
		c.e.errs.add("exporting spans", err)
	}
	return err
}
