package exporter

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"

	"github.com/bpfleet/bpfleet/exporter/otlp"
	"github.com/bpfleet/bpfleet/internal/config"
)

type signalSetup struct {
	readers                     []sdkmetric.Reader
	spanProcessors              []sdktrace.SpanProcessor
	metricsTarget, tracesTarget string
}

// signal fills what a hand-built Config left zero in one signal's
// settings with the defaults internal/config gives.
func signal(s config.Signal) config.Signal {
	if s.Exporter == "" {
		s.Exporter = config.ExporterOTLP
	}
	if s.Protocol == "" {
		s.Protocol = config.ProtocolHTTP
	}
	if s.Compression == "" {
		s.Compression = config.CompressionGzip
	}
	if s.Timeout <= 0 {
		s.Timeout = config.DefaultOTLPTimeout
	}
	return s
}

// target is how the start-up line names an OTLP destination: the
// endpoint as it was given (the flag's or generic variable's base URL).
func target(s *config.Signal) string {
	ep := s.EndpointGiven
	if ep == "" {
		ep = s.Endpoint
	}
	return "otlp " + string(s.Protocol) + " " + ep
}

func (e *Exporter) signals(ctx context.Context) (signalSetup, error) {
	var s signalSetup
	out := e.cfg.ConsoleOut
	if out == nil {
		out = os.Stdout
	}
	metrics, traces := signal(e.cfg.OTel.Metrics), signal(e.cfg.OTel.Traces)
	var targets []string

	// The interval and timeout are given, so the periodic reader reads no
	// OTEL_METRIC_EXPORT_* itself and the interval the agent logs is the
	// one in use.
	readerOpts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithProducer(e.series), sdkmetric.WithProducer(e.prof),
		sdkmetric.WithInterval(e.cfg.exportInterval()), sdkmetric.WithTimeout(e.cfg.exportTimeout())}
	// pushed returns the reader of a pushing exporter: exported after the
	// Updates (push.go) when they come at a steady pace, else by the SDK's
	// periodic reader. Each pushed destination has a series producer of
	// its own, which reuses its data points from one export to the next.
	pushed := func(exp sdkmetric.Exporter) sdkmetric.Reader {
		if e.cfg.ScanInterval <= 0 {
			return sdkmetric.NewPeriodicReader(exp, readerOpts...)
		}
		if e.push == nil {
			e.push = newPusher(e.cfg.exportInterval(), e.cfg.exportTimeout(), e.cfg.ScanInterval)
		}
		return e.push.add(exp, &seriesProducer{e: e, reuse: true}, e.prof)
	}

	if metrics.OTLP() {
		exp, err := e.metricExporter(ctx, &metrics)
		if err != nil {
			return s, err
		}
		s.readers = append(s.readers, pushed(&countingMetricExporter{Exporter: exp, e: e}))
		targets = append(targets, target(&metrics))
	}
	if metrics.Exporter == config.ExporterPrometheus {
		r, url, err := e.prometheusReader()
		if err != nil {
			return s, err
		}
		s.readers = append(s.readers, r)
		targets = append(targets, "prometheus "+url)
	}
	if e.cfg.Console || metrics.Exporter == config.ExporterConsole {
		exp, err := stdoutmetric.New(stdoutmetric.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console metric exporter: %w", err)
		}
		s.readers = append(s.readers, pushed(exp))
		targets = append(targets, "console")
	}
	s.metricsTarget = strings.Join(targets, " ")

	if traces.OTLP() {
		exp, err := e.spanExporter(ctx, &traces)
		if err != nil {
			return s, err
		}
		// A bounded queue (OTel.SpanQueue): with the backend down, spans
		// beyond it are dropped rather than held, and counted.
		s.spanProcessors = append(s.spanProcessors, otlp.NewSpanQueue(exp, e.cfg.OTel.SpanQueue, &e.spansDropped, func(err error) {
			e.traceErrs.Add(1)
			e.errs.add("exporting spans", err)
		}))
		s.tracesTarget = target(&traces)
	}
	if e.cfg.Console || traces.Exporter == config.ExporterConsole {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return s, fmt.Errorf("creating console span exporter: %w", err)
		}
		// The OTEL_BSP_* settings as resolved, given: the processor
		// reads no environment itself.
		q := otlp.SpanQueueDefaults(e.cfg.OTel.SpanQueue)
		s.spanProcessors = append(s.spanProcessors, sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithMaxQueueSize(q.Size),
			sdktrace.WithMaxExportBatchSize(q.Batch), sdktrace.WithBatchTimeout(q.Delay), sdktrace.WithExportTimeout(q.Timeout)))
		s.tracesTarget = strings.TrimSpace(s.tracesTarget + " console")
	}
	return s, nil
}

// prometheusReader serves the metrics for scraping at
// http://OTel.PrometheusHost:PrometheusPort/metrics
// (OTEL_EXPORTER_PROMETHEUS_HOST/PORT). Scrapes read the latest snapshot
// like the periodic readers do, so a scrape never waits for a kernel scan.
// The listener is bound here so a taken port stops the agent at start with
// one line, not later.
func (e *Exporter) prometheusReader() (sdkmetric.Reader, string, error) {
	host := e.cfg.OTel.PrometheusHost
	if host == "" {
		host = config.DefaultPrometheusHost
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
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(e.cfg.OTel.PrometheusPort)))
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

// The SDK's OTLP exporters read the OTEL_EXPORTER_OTLP_* variables for
// every setting not given as an option, and an option overrides its
// variable. So every setting internal/config resolved is given here, and
// what the SDK would read from the environment never decides anything:
// the endpoint (its scheme saying Insecure), headers, timeout, TLS,
// compression and, for metrics, temporality and histogram aggregation.

// sdkEndpointURL is s's endpoint with the scheme the SDK reads Insecure
// from in WithEndpointURL: http for plaintext, https for TLS.
func sdkEndpointURL(s *config.Signal) string {
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		return s.Endpoint // config checked it: not reached
	}
	u.Scheme = "https"
	if s.Insecure {
		u.Scheme = "http"
	}
	return u.String()
}

// grpcDialOptions are the gRPC exporters' transport settings: TLS as the
// SDK sets it from the variables (certificate files give TLS whatever the
// scheme), compression none when so resolved, and no proxy unless the
// resolved proxy variables name one for the endpoint. grpc-go takes no
// proxy function: it reads HTTPS_PROXY and NO_PROXY itself (net/http's
// ProxyFromEnvironment), so a proxy that config resolved for the endpoint
// is left to it to find again, in the same process environment that
// internal/config reads (os.LookupEnv) in the agent.
func (e *Exporter) grpcDialOptions(s *config.Signal, tlsConf *tls.Config) ([]grpc.DialOption, credentials.TransportCredentials) {
	var creds credentials.TransportCredentials
	switch {
	case tlsConf != nil:
		creds = credentials.NewTLS(tlsConf)
	case !s.Insecure:
		creds = credentials.NewTLS(nil) // the host's roots, as the SDK's default
	}
	var dial []grpc.DialOption
	if s.Compression != config.CompressionGzip {
		// No compression, whatever OTEL_EXPORTER_OTLP_COMPRESSION says:
		// the SDK's WithCompressor takes only "gzip" (any other name
		// is reported as an error), and a dial option given is applied
		// after the SDK's own call options, so identity wins.
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.UseCompressor(encoding.Identity)))
	}
	if u, err := url.Parse(sdkEndpointURL(s)); err == nil {
		u.Scheme = "https" // grpc-go asks for the https proxy whatever the scheme
		if p, err := e.cfg.OTel.Proxy.ProxyFunc()(u); err == nil && p == nil {
			dial = append(dial, grpc.WithNoProxy())
		}
	}
	return dial, creds
}

func (e *Exporter) metricExporter(ctx context.Context, s *config.Signal) (sdkmetric.Exporter, error) {
	tlsConf, err := s.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("creating OTLP %s metric exporter: OTLP %w", s.Protocol, err)
	}
	var exp sdkmetric.Exporter
	if s.Protocol == config.ProtocolGRPC {
		dial, creds := e.grpcDialOptions(s, tlsConf)
		opts := []otlpmetricgrpc.Option{
			// Cumulative whatever
			// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE says:
			// the values are the kernel's cumulative counters, and
			// Prometheus' OTLP receiver accepts only cumulative sums.
			otlpmetricgrpc.WithTemporalitySelector(sdkmetric.DefaultTemporalitySelector),
			otlpmetricgrpc.WithAggregationSelector(aggregationSelector(s.HistogramAggregation)),
			otlpmetricgrpc.WithEndpointURL(sdkEndpointURL(s)),
			otlpmetricgrpc.WithHeaders(s.Headers),
			otlpmetricgrpc.WithTimeout(s.Timeout),
			otlpmetricgrpc.WithDialOption(dial...),
		}
		if s.Compression == config.CompressionGzip {
			opts = append(opts, otlpmetricgrpc.WithCompressor("gzip"))
		}
		if creds != nil {
			opts = append(opts, otlpmetricgrpc.WithTLSCredentials(creds))
		} else {
			opts = append(opts, otlpmetricgrpc.WithInsecure())
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		// http/protobuf: bpfleet's own encoder (exporter/otlp), which keeps
		// each series' encoding between exports.
		exp = otlp.NewMetricExporter(otlp.MetricConfig{URL: s.Endpoint, Headers: s.Headers, Timeout: s.Timeout,
			Gzip: s.Compression == config.CompressionGzip, TLS: tlsConf, Proxy: e.cfg.OTel.Proxy.ProxyFunc(),
			Keep: 2 * max(e.cfg.ResendUnchanged, e.cfg.exportInterval())})
	}
	if err != nil {
		return nil, fmt.Errorf("creating OTLP %s metric exporter: %w", s.Protocol, err)
	}
	return exp, nil
}

func (e *Exporter) spanExporter(ctx context.Context, s *config.Signal) (sdktrace.SpanExporter, error) {
	tlsConf, err := s.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("creating OTLP %s span exporter: OTLP %w", s.Protocol, err)
	}
	var exp sdktrace.SpanExporter
	if s.Protocol == config.ProtocolGRPC {
		dial, creds := e.grpcDialOptions(s, tlsConf)
		opts := []otlptracegrpc.Option{
			otlptracegrpc.WithEndpointURL(sdkEndpointURL(s)),
			otlptracegrpc.WithHeaders(s.Headers),
			otlptracegrpc.WithTimeout(s.Timeout),
			otlptracegrpc.WithDialOption(dial...),
		}
		if s.Compression == config.CompressionGzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		if creds != nil {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(creds))
		} else {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		comp := otlptracehttp.NoCompression
		if s.Compression == config.CompressionGzip {
			comp = otlptracehttp.GzipCompression
		}
		proxy := e.cfg.OTel.Proxy.ProxyFunc()
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpointURL(sdkEndpointURL(s)),
			otlptracehttp.WithHeaders(s.Headers),
			otlptracehttp.WithTimeout(s.Timeout),
			otlptracehttp.WithCompression(comp),
			otlptracehttp.WithProxy(func(r *http.Request) (*url.URL, error) { return proxy(r.URL) }),
		}
		if tlsConf != nil {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsConf))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("creating OTLP %s span exporter: %w", s.Protocol, err)
	}
	return exp, nil
}

// aggregationSelector is OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION
// as the SDK's gRPC exporter reads it: base-2 exponential histograms with
// its sizes, else explicit buckets.
func aggregationSelector(v string) sdkmetric.AggregationSelector {
	if v != "base2_exponential_bucket_histogram" {
		return sdkmetric.DefaultAggregationSelector
	}
	return func(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
		if k == sdkmetric.InstrumentKindHistogram {
			return sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}
		}
		return sdkmetric.DefaultAggregationSelector(k)
	}
}

// countingMetricExporter counts failed exports for bpf.agent.export.errors
// and the once-per-interval log line.
type countingMetricExporter struct {
	sdkmetric.Exporter
	e *Exporter
}

func (c *countingMetricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	if c.e.cfg.Clock != nil {
		restamp(rm, c.e.stamp(c.e.latest()), c.e.started)
	}
	stampStarts(rm)
	err := c.Exporter.Export(ctx, rm)
	if err != nil {
		c.e.metricErrs.Add(1)
		c.e.errs.add("exporting metrics", err)
	}
	c.e.metricExported(err)
	return err
}

// ForceFlush counts too: the wire exporter reports a request's failed
// answer when it reads it, at the next export or here.
func (c *countingMetricExporter) ForceFlush(ctx context.Context) error {
	err := c.Exporter.ForceFlush(ctx)
	if err != nil {
		c.e.metricErrs.Add(1)
		c.e.errs.add("exporting metrics", err)
		// Only a failure counts here: a flush with nothing pending says
		// nothing about the backend.
		c.e.metricExported(err)
	}
	return err
}
