package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
)

// Protocol is an OTLP protocol as OTEL_EXPORTER_OTLP_PROTOCOL spells it.
type Protocol string

// The protocols the agent exports with.
const (
	ProtocolGRPC Protocol = "grpc"
	ProtocolHTTP Protocol = "http/protobuf"
)

// ExporterKind is an OTEL_METRICS_EXPORTER / OTEL_TRACES_EXPORTER value.
type ExporterKind string

// The exporters the agent supports.
const (
	ExporterOTLP       ExporterKind = "otlp"
	ExporterConsole    ExporterKind = "console"
	ExporterNone       ExporterKind = "none"
	ExporterPrometheus ExporterKind = "prometheus" // metrics only
)

// prometheusSupported says the exporter has the Prometheus scrape path
// (exporter serves OTEL_METRICS_EXPORTER=prometheus on
// OTEL_EXPORTER_PROMETHEUS_HOST:PORT).
const prometheusSupported = true

// Compression is an OTEL_EXPORTER_OTLP_COMPRESSION value.
type Compression string

// The compressions the OTLP exporters support.
const (
	CompressionNone Compression = "none"
	CompressionGzip Compression = "gzip"
)

// DefaultOTLPTimeout is the spec's default of OTEL_EXPORTER_OTLP_TIMEOUT.
const DefaultOTLPTimeout = 10 * time.Second

// Signal is where one signal (metrics or traces) goes, as the agent will
// really send it: every OTEL_EXPORTER_OTLP_[SIGNAL_]* setting, resolved
// once here (the signal's variable over the generic one); the exporter
// reads no environment.
type Signal struct {
	Exporter ExporterKind
	// Endpoint is the full URL the OTLP exporter sends to ("" with no
	// endpoint configured); EndpointFrom names the flag or variable it
	// came from and EndpointGiven is its value there (a base URL for the
	// flag and the generic variable), as the start-up line says it.
	Endpoint      string
	EndpointFrom  string
	EndpointGiven string
	Protocol      Protocol
	// Headers are sent with every request; their values may be secrets
	// and are never logged (settings names the keys only).
	Headers     map[string]string
	Timeout     time.Duration
	Compression Compression
	// Insecure is plaintext (no TLS) to the endpoint: its http:// scheme,
	// unless OTEL_EXPORTER_OTLP_[SIGNAL_]INSECURE says otherwise (the
	// SDK applies that variable after the endpoint's scheme; the
	// --otlp-endpoint flag, an option, overrides both).
	Insecure bool
	// TLS names the PEM files of OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE,
	// _CLIENT_CERTIFICATE and _CLIENT_KEY; the exporter loads them.
	TLS TLSFiles
	// HistogramAggregation is
	// OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION (metrics
	// only; "": explicit buckets, the default).
	HistogramAggregation string
}

// TLSFiles are the PEM files of one signal's TLS settings; "" for unset.
type TLSFiles struct {
	Certificate, ClientCertificate, ClientKey string
}

// Set reports whether any file is named.
func (f TLSFiles) Set() bool {
	return f.Certificate != "" || f.ClientCertificate != "" || f.ClientKey != ""
}

// OTLP reports whether the signal is exported over OTLP.
func (s *Signal) OTLP() bool { return s.Exporter == ExporterOTLP && s.Endpoint != "" }

// OTel is the agent's OpenTelemetry configuration, resolved from
// --otlp-endpoint/--otlp-protocol and the OTEL_* variables.
type OTel struct {
	SDKDisabled     bool
	Metrics, Traces Signal
	// Endpoint is --otlp-endpoint as a URL (a gRPC host:port given on the
	// flag gets its scheme here); "" when unset. The signals' endpoints
	// are resolved from it.
	Endpoint string
	// MetricExportInterval and MetricExportTimeout are
	// OTEL_METRIC_EXPORT_INTERVAL / _TIMEOUT; 0 when unset.
	MetricExportInterval time.Duration
	MetricExportTimeout  time.Duration
	ServiceName          string
	ResourceAttributes   map[string]string
	// SpanQueue is the episode spans' export queue, from OTEL_BSP_*.
	SpanQueue SpanQueue
	// Sampler is OTEL_TRACES_SAMPLER (always_on, parentbased_traceidratio,
	// ...); "": unset, the SDK's parentbased_always_on. SamplerArg is
	// OTEL_TRACES_SAMPLER_ARG, the ratio of the ratio samplers (1 when
	// unset).
	Sampler    string
	SamplerArg float64
	// SpanLimits are the OTEL_SPAN_*_LIMIT, OTEL_ATTRIBUTE_*_LIMIT,
	// OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT and OTEL_LINK_ATTRIBUTE_COUNT_LIMIT
	// values, with the SDK's defaults.
	SpanLimits SpanLimits
	// ExemplarFilter is OTEL_METRICS_EXEMPLAR_FILTER (always_on,
	// always_off or trace_based); "": unset, and the exporter records no
	// exemplars.
	ExemplarFilter string
	// PrometheusHost and PrometheusPort are where
	// OTEL_METRICS_EXPORTER=prometheus serves scrapes:
	// OTEL_EXPORTER_PROMETHEUS_HOST and _PORT, else the spec's
	// localhost:9464 (port 0: any free port).
	PrometheusHost string
	PrometheusPort int
	// Proxy is the HTTP proxy settings of HTTP_PROXY, HTTPS_PROXY and
	// NO_PROXY (or their lower-case forms), read as net/http's
	// ProxyFromEnvironment reads them; the exporter's HTTP clients take
	// Proxy.ProxyFunc().
	Proxy httpproxy.Config

	// problems are the parse errors resolve found; Validate reports them.
	problems []error
}

// SpanQueue bounds the spans waiting for export (the batch span
// processor's settings, OTEL_BSP_*, with the spec's defaults): Size spans
// at most, sent Batch at a time at least every Delay, each export given
// Timeout.
type SpanQueue struct {
	Size, Batch    int
	Delay, Timeout time.Duration
}

// SpanLimits bound what one span carries (the SDK's span limits; -1: no
// limit).
type SpanLimits struct {
	AttributeValueLength, AttributeCount, EventCount, LinkCount, AttributesPerEvent, AttributesPerLink int
}

// DefaultSpanLimits are the SDK's defaults: values of any length, 128 of
// everything else.
var DefaultSpanLimits = SpanLimits{-1, 128, 128, 128, 128, 128}

// resolveSpanLimits reads the limits as the SDK does: the span-specific
// variable over the general one; a malformed value (reported by
// envChecks) keeps the default.
func resolveSpanLimits(get func(string) string) SpanLimits {
	l := DefaultSpanLimits
	for _, v := range []struct {
		dst   *int
		names []string
	}{
		{&l.AttributeValueLength, []string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"}},
		{&l.AttributeCount, []string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"}},
		{&l.EventCount, []string{"OTEL_SPAN_EVENT_COUNT_LIMIT"}},
		{&l.LinkCount, []string{"OTEL_SPAN_LINK_COUNT_LIMIT"}},
		{&l.AttributesPerEvent, []string{"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT"}},
		{&l.AttributesPerLink, []string{"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"}},
	} {
		if n, err := strconv.ParseInt(firstSet(get, v.names...).value, 10, 32); err == nil {
			*v.dst = int(n)
		}
	}
	return l
}

// The spec's defaults of OTEL_BSP_*.
const (
	DefaultSpanQueueSize    = 2048
	DefaultSpanQueueBatch   = 512
	DefaultSpanQueueDelay   = 5 * time.Second
	DefaultSpanQueueTimeout = 30 * time.Second
)

// resolveSpanQueue reads OTEL_BSP_*; a malformed value (reported by
// envChecks) keeps the default.
func resolveSpanQueue(get func(string) string) SpanQueue {
	q := SpanQueue{DefaultSpanQueueSize, DefaultSpanQueueBatch, DefaultSpanQueueDelay, DefaultSpanQueueTimeout}
	num := func(name string, min int64) (int64, bool) {
		n, err := strconv.ParseInt(get(name), 10, 64)
		return n, err == nil && n >= min
	}
	if n, ok := num("OTEL_BSP_MAX_QUEUE_SIZE", 1); ok {
		q.Size = int(n)
	}
	if n, ok := num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1); ok {
		q.Batch = int(n)
	}
	if n, ok := num("OTEL_BSP_SCHEDULE_DELAY", 0); ok {
		q.Delay = time.Duration(n) * time.Millisecond
	}
	if n, ok := num("OTEL_BSP_EXPORT_TIMEOUT", 0); ok {
		q.Timeout = time.Duration(n) * time.Millisecond
	}
	// As the SDK's batch processor: a batch is never larger than the queue.
	q.Batch = min(q.Batch, q.Size)
	return q
}

// The variables of one signal, with the generic one last.
func otlpVars(signal, suffix string) []string {
	return []string{"OTEL_EXPORTER_OTLP_" + signal + "_" + suffix, "OTEL_EXPORTER_OTLP_" + suffix}
}

// ResolveOTel resolves and checks the OpenTelemetry settings alone: the
// OTEL_* variables in env with the --otlp-endpoint and --otlp-protocol
// values given ("" for unset), as Agent.Resolve does, for a caller that
// builds an exporter without an agent (tests, benchmarks).
func ResolveOTel(env Lookup, endpoint, protocol string) (OTel, error) {
	var o OTel
	err := o.resolve(env, endpoint, protocol)
	return o, errors.Join(err, o.Validate())
}

// resolve reads every OTEL_* variable the SDK or the agent reads, checks
// each set one, and fills o. Empty values count as unset (the spec says
// so).
func (o *OTel) resolve(env Lookup, flagEndpoint, flagProtocol string) error {
	*o = OTel{}
	get := func(name string) string {
		v, _ := env(name)
		return strings.TrimSpace(v)
	}
	bad := func(err error) { o.problems = append(o.problems, err) }

	// Variables the SDK reads itself and, when malformed, only warns
	// about (or silently ignores) before falling back to its default.
	for _, c := range envChecks {
		if v := get(c.name); v != "" {
			if want := c.check(v); want != "" {
				bad(problem(c.name, v, "%s", want))
			}
		}
	}

	if v := get("OTEL_SDK_DISABLED"); v != "" {
		b, err := parseBool(v)
		if err != nil {
			bad(problem("OTEL_SDK_DISABLED", v, "want true or false"))
		}
		o.SDKDisabled = b
	}
	o.ServiceName = get("OTEL_SERVICE_NAME")
	if v := get("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		kv, err := parseKV(v, false)
		if err != nil {
			bad(problem("OTEL_RESOURCE_ATTRIBUTES", v, "%v: want key=value,key=value with values URL-encoded (%%2C for a comma)", err))
		}
		o.ResourceAttributes = kv
	}
	o.SpanQueue = resolveSpanQueue(get)
	o.ExemplarFilter = get("OTEL_METRICS_EXEMPLAR_FILTER") // checked by envChecks
	o.Sampler, o.SamplerArg = get("OTEL_TRACES_SAMPLER"), 1
	if f, err := strconv.ParseFloat(get("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && f >= 0 && f <= 1 {
		o.SamplerArg = f // else reported by envChecks
	}
	o.SpanLimits = resolveSpanLimits(get)
	o.PrometheusHost, o.PrometheusPort = DefaultPrometheusHost, DefaultPrometheusPort
	if v := get("OTEL_EXPORTER_PROMETHEUS_HOST"); v != "" {
		o.PrometheusHost = v
	}
	if n, err := strconv.ParseUint(get("OTEL_EXPORTER_PROMETHEUS_PORT"), 10, 16); err == nil {
		o.PrometheusPort = int(n) // a malformed one was reported by envChecks
	}
	o.Proxy = resolveProxy(env)
	o.MetricExportInterval = o.millis(get, "OTEL_METRIC_EXPORT_INTERVAL")
	o.MetricExportTimeout = o.millis(get, "OTEL_METRIC_EXPORT_TIMEOUT")

	o.Metrics.Exporter = o.exporterKind(get, "OTEL_METRICS_EXPORTER", true)
	o.Traces.Exporter = o.exporterKind(get, "OTEL_TRACES_EXPORTER", false)
	if o.SDKDisabled {
		o.Metrics.Exporter, o.Traces.Exporter = ExporterNone, ExporterNone
	}

	// Every endpoint, header, timeout and compression variable is checked
	// whether or not a more specific one overrides it: a malformed value
	// is a mistake wherever it is.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		if v := get(name); v != "" {
			if _, err := parseEndpoint(v, false); err != nil {
				bad(problem(name, v, "%v", err))
			}
		}
	}
	if flagProtocol != "" {
		if want := checkProtocol(flagProtocol); want != "" {
			bad(problem("--otlp-protocol", flagProtocol, "%s", want))
		}
	}
	for _, sig := range []struct {
		name, path string
		s          *Signal
	}{{"METRICS", "/v1/metrics", &o.Metrics}, {"TRACES", "/v1/traces", &o.Traces}} {
		s := sig.s
		s.Protocol = ProtocolHTTP
		if p := firstSet(get, otlpVars(sig.name, "PROTOCOL")...); flagProtocol != "" {
			if checkProtocol(flagProtocol) == "" {
				s.Protocol = Protocol(flagProtocol)
			}
		} else if p.value != "" {
			if want := checkProtocol(p.value); want != "" {
				bad(problem(p.name, p.value, "%s", want))
			} else {
				s.Protocol = Protocol(p.value)
			}
		}
		switch ep := firstSet(get, otlpVars(sig.name, "ENDPOINT")...); {
		case flagEndpoint != "":
			s.EndpointFrom = "--otlp-endpoint"
			u, err := parseEndpoint(flagEndpoint, s.Protocol == ProtocolGRPC)
			if err != nil {
				break // reported once, below
			}
			o.Endpoint = u
			s.Endpoint, s.EndpointGiven = u, u
			if s.Protocol != ProtocolGRPC {
				s.Endpoint = strings.TrimRight(u, "/") + sig.path
			}
			s.Insecure = strings.HasPrefix(u, "http://")
		case ep.name != "":
			s.EndpointFrom = ep.name
			s.Endpoint, s.EndpointGiven = ep.value, ep.value
			s.Insecure = strings.HasPrefix(ep.value, "http://")
			if i := firstSet(get, otlpVars(sig.name, "INSECURE")...); i.value != "" {
				if b, err := parseBool(i.value); err == nil {
					s.Insecure = b // else reported by envChecks
				}
			}
			// The generic variable is a base URL: the SDK adds the
			// signal's path for HTTP.
			if ep.name == "OTEL_EXPORTER_OTLP_ENDPOINT" && s.Protocol != ProtocolGRPC {
				s.Endpoint = strings.TrimRight(ep.value, "/") + sig.path
			}
		}
		if h := firstSet(get, otlpVars(sig.name, "HEADERS")...); h.value != "" {
			s.Headers, _ = parseKV(h.value, true) // a malformed list was reported by envChecks
		}
		s.TLS = TLSFiles{
			Certificate:       firstSet(get, otlpVars(sig.name, "CERTIFICATE")...).value,
			ClientCertificate: firstSet(get, otlpVars(sig.name, "CLIENT_CERTIFICATE")...).value,
			ClientKey:         firstSet(get, otlpVars(sig.name, "CLIENT_KEY")...).value,
		}
		if sig.name == "METRICS" {
			s.HistogramAggregation = get("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION") // checked by envChecks
		}
		s.Timeout = DefaultOTLPTimeout
		if t := firstSet(get, otlpVars(sig.name, "TIMEOUT")...); t.value != "" {
			if n, err := strconv.ParseInt(t.value, 10, 64); err == nil && n > 0 {
				s.Timeout = time.Duration(n) * time.Millisecond
			}
		}
		// gzip unless told otherwise: bpfleet's default, not the spec's
		// none (an export of 1,000 programs shrinks about tenfold).
		// Invalid values were reported by envChecks.
		s.Compression = CompressionGzip
		if c := firstSet(get, otlpVars(sig.name, "COMPRESSION")...); c.value == string(CompressionNone) {
			s.Compression = CompressionNone
		}
	}
	if flagEndpoint != "" {
		if _, err := parseEndpoint(flagEndpoint, o.Metrics.Protocol == ProtocolGRPC && o.Traces.Protocol == ProtocolGRPC); err != nil {
			bad(problem("--otlp-endpoint", flagEndpoint, "%v", err))
		}
	}
	// A generic variable is read for both signals: say it once.
	seen := map[string]bool{}
	o.problems = slices.DeleteFunc(o.problems, func(err error) bool {
		dup := seen[err.Error()]
		seen[err.Error()] = true
		return dup
	})
	return nil
}

// Validate checks the resolved settings and returns, joined, every
// problem resolve found. resolve keeps only valid values in the fields, so
// the enum checks here only catch an OTel built by hand.
func (o *OTel) Validate() error {
	errs := slices.Clone(o.problems)
	for _, s := range []struct {
		name string
		s    *Signal
	}{{"METRICS", &o.Metrics}, {"TRACES", &o.Traces}} {
		switch s.s.Exporter {
		case ExporterOTLP, ExporterConsole, ExporterNone:
		case ExporterPrometheus:
			if s.name != "METRICS" || !prometheusSupported {
				errs = append(errs, problem("OTEL_"+s.name+"_EXPORTER", string(s.s.Exporter), "want otlp, console or none"))
			}
		default:
			errs = append(errs, problem("OTEL_"+s.name+"_EXPORTER", string(s.s.Exporter), "want otlp, console or none"))
		}
		if s.s.Protocol != ProtocolGRPC && s.s.Protocol != ProtocolHTTP {
			errs = append(errs, problem("OTEL_EXPORTER_OTLP_"+s.name+"_PROTOCOL", string(s.s.Protocol), "want grpc or http/protobuf"))
		}
		if s.s.Compression != CompressionGzip && s.s.Compression != CompressionNone {
			errs = append(errs, problem("OTEL_EXPORTER_OTLP_"+s.name+"_COMPRESSION", string(s.s.Compression), "want gzip or none"))
		}
	}
	return errors.Join(errs...)
}

func (o *OTel) millis(get func(string) string, name string) time.Duration {
	v := get(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(24*time.Hour/time.Millisecond) {
		o.problems = append(o.problems, problem(name, v, "want a whole number of milliseconds from 1 to 86400000"))
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

func (o *OTel) exporterKind(get func(string) string, name string, metrics bool) ExporterKind {
	v := get(name)
	if v == "" {
		return ExporterOTLP
	}
	k := ExporterKind(v)
	switch {
	case k == ExporterOTLP, k == ExporterConsole, k == ExporterNone:
		return k
	case k == ExporterPrometheus && metrics && prometheusSupported:
		return k
	case k == ExporterPrometheus && metrics:
		o.problems = append(o.problems, problem(name, v, "this build has no Prometheus scrape exporter: want otlp, console or none"))
	case strings.Contains(v, ","):
		o.problems = append(o.problems, problem(name, v, "one exporter only: want otlp, console or none (--console adds console output to otlp)"))
	case metrics && prometheusSupported:
		o.problems = append(o.problems, problem(name, v, "want otlp, console, none or prometheus"))
	default:
		o.problems = append(o.problems, problem(name, v, "want otlp, console or none"))
	}
	return ExporterNone
}

// The spec's defaults of OTEL_EXPORTER_PROMETHEUS_HOST and _PORT.
const (
	DefaultPrometheusHost = "localhost"
	DefaultPrometheusPort = 9464
)

// resolveProxy reads the proxy variables as httpproxy.FromEnvironment
// does (net/http's ProxyFromEnvironment), from env: the upper-case name
// first, and no HTTP_PROXY in a CGI request (REQUEST_METHOD set), whose
// Proxy header a client may set.
func resolveProxy(env Lookup) httpproxy.Config {
	get := func(names ...string) string {
		for _, n := range names {
			if v, ok := env(n); ok && v != "" {
				return v
			}
		}
		return ""
	}
	return httpproxy.Config{
		HTTPProxy:  get("HTTP_PROXY", "http_proxy"),
		HTTPSProxy: get("HTTPS_PROXY", "https_proxy"),
		NoProxy:    get("NO_PROXY", "no_proxy"),
		CGI:        get("REQUEST_METHOD") != "",
	}
}

func (o *OTel) settings() []any {
	sig := func(s *Signal) string {
		switch {
		case s.Exporter == ExporterOTLP && s.Endpoint == "":
			return "none (no endpoint)"
		case s.Exporter != ExporterOTLP:
			return string(s.Exporter)
		}
		out := fmt.Sprintf("otlp %s %s (from %s) timeout=%v compression=%s", s.Protocol, s.Endpoint, s.EndpointFrom, s.Timeout, s.Compression)
		if len(s.Headers) > 0 {
			out += " headers=" + strings.Join(slices.Sorted(maps.Keys(s.Headers)), ",")
		}
		return out
	}
	kv := []any{"metrics", sig(&o.Metrics), "traces", sig(&o.Traces)}
	if o.SDKDisabled {
		kv = append(kv, "otel_sdk_disabled", true)
	}
	if o.ServiceName != "" {
		kv = append(kv, "service_name", o.ServiceName)
	}
	if o.MetricExportTimeout > 0 {
		kv = append(kv, "metric_export_timeout", o.MetricExportTimeout)
	}
	return kv
}
