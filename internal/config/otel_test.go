package config

import (
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExporterKinds: OTEL_METRICS_EXPORTER and OTEL_TRACES_EXPORTER name
// one exporter each (otlp when unset); one the agent cannot do is refused
// with a line naming the variable, never a silent fallback: an operator
// who asked for prometheus and got nothing has no way to tell. (A list
// such as "otlp, console" is refused too: --console adds the console.)
func TestExporterKinds(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  ExporterKind // "": refused
	}{
		{"", ExporterOTLP},
		{"otlp", ExporterOTLP},
		{"prometheus", ExporterPrometheus},
		{"console", ExporterConsole},
		{"none", ExporterNone},
		{"otlp, console", ""},
		{"none,otlp", ""},
		{"jaeger", ""},
		{"zipkin", ""},
	} {
		o, err := ResolveOTel(MapEnv(map[string]string{"OTEL_METRICS_EXPORTER": tc.value}), "", "")
		if tc.want == "" {
			if err == nil {
				t.Errorf("%q accepted: %s", tc.value, o.Metrics.Exporter)
			} else if !strings.Contains(err.Error(), "OTEL_METRICS_EXPORTER") {
				t.Errorf("%q: error %q does not name the variable", tc.value, err)
			}
			continue
		}
		if err != nil || o.Metrics.Exporter != tc.want {
			t.Errorf("%q: %s, %v; want %s", tc.value, o.Metrics.Exporter, err, tc.want)
		}
	}
	// Traces have no Prometheus exporter.
	if _, err := ResolveOTel(MapEnv(map[string]string{"OTEL_TRACES_EXPORTER": "prometheus"}), "", ""); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("OTEL_TRACES_EXPORTER=prometheus: %v", err)
	}
}

// TestProtocolPrecedence: the flag, then the signal's variable, then the
// generic one, then http/protobuf.
func TestProtocolPrecedence(t *testing.T) {
	env := MapEnv(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"})
	for _, tc := range []struct {
		flag          string
		metrics, span Protocol
	}{
		{"", ProtocolGRPC, ProtocolHTTP},
		{"http/protobuf", ProtocolHTTP, ProtocolHTTP},
		{"grpc", ProtocolGRPC, ProtocolGRPC},
	} {
		o, err := ResolveOTel(env, "", tc.flag)
		if err != nil || o.Metrics.Protocol != tc.metrics || o.Traces.Protocol != tc.span {
			t.Errorf("flag %q: metrics %s traces %s, %v; want %s %s", tc.flag, o.Metrics.Protocol, o.Traces.Protocol, err, tc.metrics, tc.span)
		}
	}
	if o, _ := ResolveOTel(MapEnv(nil), "", ""); o.Metrics.Protocol != ProtocolHTTP {
		t.Errorf("unset: %s, want http/protobuf", o.Metrics.Protocol)
	}
	// http/json is refused, naming the variable.
	if _, err := ResolveOTel(MapEnv(map[string]string{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}), "", ""); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") {
		t.Errorf("http/json: %v", err)
	}
}

// TestCompressionPrecedence: --otlp-compression, then the signal's
// variable, then the generic one, then gzip (bpfleet's default); anything
// but gzip or none is refused.
func TestCompressionPrecedence(t *testing.T) {
	for _, tc := range []struct {
		flag, generic, signal string
		want                  Compression // "": refused
	}{
		{"", "", "", CompressionGzip},
		{"", "none", "", CompressionNone},
		{"", "none", "gzip", CompressionGzip},
		{"none", "gzip", "", CompressionNone},
		{"zstd", "", "", ""},
		{"", "", "zstd", ""},
	} {
		c := agentWith(func(a *Agent) { a.Compression = tc.flag })
		err := c.Resolve(MapEnv(map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": tc.generic, "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": tc.signal}))
		if tc.want == "" {
			if err == nil {
				t.Errorf("flag %q env %q/%q accepted", tc.flag, tc.generic, tc.signal)
			}
			continue
		}
		if err != nil || c.OTel.Metrics.Compression != tc.want {
			t.Errorf("flag %q env %q/%q: %s, %v; want %s", tc.flag, tc.generic, tc.signal, c.OTel.Metrics.Compression, err, tc.want)
		}
	}
}

// TestSignalSettings: every setting the exporter hands the OTLP
// exporters is resolved here, the signal's variable over the generic one.
func TestSignalSettings(t *testing.T) {
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, metricsCA, cert, key := file("ca"), file("metrics-ca"), file("cert"), file("key")
	o, err := ResolveOTel(MapEnv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":                              "https://collector:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":                       "http://jaeger:4318/v1/traces",
		"OTEL_EXPORTER_OTLP_HEADERS":                               "Authorization=Bearer%20abc, X-Tenant=a%2Cb",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":                        "X-Tenant=traces",
		"OTEL_EXPORTER_OTLP_TIMEOUT":                               "2500",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT":                        "700",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":                           ca,
		"OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE":                   metricsCA,
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE":                    cert,
		"OTEL_EXPORTER_OTLP_CLIENT_KEY":                            key,
		"OTEL_EXPORTER_OTLP_TRACES_INSECURE":                       "false",
		"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION": "base2_exponential_bucket_histogram",
		"OTEL_METRICS_EXEMPLAR_FILTER":                             "trace_based",
		"OTEL_METRIC_EXPORT_TIMEOUT":                               "300",
	}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	m, tr := o.Metrics, o.Traces
	if m.Endpoint != "https://collector:4318/v1/metrics" || m.EndpointGiven != "https://collector:4318" || m.Insecure {
		t.Errorf("metrics endpoint %q given %q insecure %v", m.Endpoint, m.EndpointGiven, m.Insecure)
	}
	if tr.Endpoint != "http://jaeger:4318/v1/traces" || tr.Insecure {
		t.Errorf("traces endpoint %q insecure %v: OTEL_EXPORTER_OTLP_TRACES_INSECURE=false wins over the scheme", tr.Endpoint, tr.Insecure)
	}
	if want := map[string]string{"Authorization": "Bearer abc", "X-Tenant": "a,b"}; !maps.Equal(m.Headers, want) {
		t.Errorf("metrics headers %v, want %v", m.Headers, want)
	}
	if want := map[string]string{"X-Tenant": "traces"}; !maps.Equal(tr.Headers, want) {
		t.Errorf("traces headers %v, want %v", tr.Headers, want)
	}
	if m.Timeout != 2500*time.Millisecond || tr.Timeout != 700*time.Millisecond {
		t.Errorf("timeouts %v %v, want 2.5s 700ms", m.Timeout, tr.Timeout)
	}
	if want := (TLSFiles{metricsCA, cert, key}); m.TLS != want {
		t.Errorf("metrics TLS %+v, want %+v", m.TLS, want)
	}
	if want := (TLSFiles{ca, cert, key}); tr.TLS != want {
		t.Errorf("traces TLS %+v, want %+v", tr.TLS, want)
	}
	if m.HistogramAggregation != "base2_exponential_bucket_histogram" || o.ExemplarFilter != "trace_based" || o.MetricExportTimeout != 300*time.Millisecond {
		t.Errorf("aggregation %q exemplars %q export timeout %v", m.HistogramAggregation, o.ExemplarFilter, o.MetricExportTimeout)
	}

	// Defaults, and the flag: its scheme alone says insecure.
	o, err = ResolveOTel(MapEnv(map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "false"}), "collector:4317", "grpc")
	if err != nil {
		t.Fatal(err)
	}
	if m := o.Metrics; m.Endpoint != "http://collector:4317" || !m.Insecure || m.Timeout != DefaultOTLPTimeout || m.Compression != CompressionGzip || m.Headers != nil || m.TLS.Set() {
		t.Errorf("defaults: %+v", m)
	}
	if o.PrometheusHost != DefaultPrometheusHost || o.PrometheusPort != DefaultPrometheusPort || o.ExemplarFilter != "" {
		t.Errorf("prometheus %s:%d exemplars %q, want the defaults", o.PrometheusHost, o.PrometheusPort, o.ExemplarFilter)
	}
}

// TestPrometheusAddr: OTEL_EXPORTER_PROMETHEUS_HOST and _PORT, port 0 for
// any free port; a port that is not a number is refused, naming it.
func TestPrometheusAddr(t *testing.T) {
	o, err := ResolveOTel(MapEnv(map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": "0"}), "", "")
	if err != nil || o.PrometheusHost != "127.0.0.1" || o.PrometheusPort != 0 {
		t.Errorf("%s:%d, %v; want 127.0.0.1:0", o.PrometheusHost, o.PrometheusPort, err)
	}
	if _, err := ResolveOTel(MapEnv(map[string]string{"OTEL_EXPORTER_PROMETHEUS_PORT": "metrics"}), "", ""); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_PROMETHEUS_PORT") {
		t.Errorf("port \"metrics\": %v", err)
	}
}

// TestProxy: the proxy variables as net/http reads them: upper case first,
// NO_PROXY excepting hosts, and HTTP_PROXY refused inside a CGI request
// (a client may set its Proxy header).
func TestProxy(t *testing.T) {
	proxyFor := func(env map[string]string, target string) string {
		t.Helper()
		o, err := ResolveOTel(MapEnv(env), "", "")
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(target)
		p, err := o.Proxy.ProxyFunc()(u)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return ""
		}
		return p.String()
	}
	env := map[string]string{"HTTP_PROXY": "http://proxy.invalid:3128", "http_proxy": "http://lower.invalid:1", "NO_PROXY": "collector.local", "https_proxy": "http://tls.invalid:3129"}
	for _, tc := range []struct{ url, want string }{
		{"http://collector:4318/v1/metrics", "http://proxy.invalid:3128"},
		{"http://collector.local:4318/v1/metrics", ""},
		{"https://collector:4318/v1/metrics", "http://tls.invalid:3129"},
	} {
		if got := proxyFor(env, tc.url); got != tc.want {
			t.Errorf("proxy for %s: %q, want %q", tc.url, got, tc.want)
		}
	}
	env["REQUEST_METHOD"] = "GET"
	o, _ := ResolveOTel(MapEnv(env), "", "")
	if p, err := o.Proxy.ProxyFunc()(&url.URL{Scheme: "http", Host: "collector:4318"}); err == nil {
		t.Errorf("CGI request: proxy %v, want HTTP_PROXY refused", p)
	}
	if got := proxyFor(nil, "http://collector:4318/v1/metrics"); got != "" {
		t.Errorf("no variables: proxy %q", got)
	}
}

// TestResourceFromEnv: OTEL_RESOURCE_ATTRIBUTES decoded, and
// OTEL_SERVICE_NAME.
func TestResourceFromEnv(t *testing.T) {
	o, err := ResolveOTel(MapEnv(map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,k8s.cluster.name=from-env,team=a%20b", "OTEL_SERVICE_NAME": "custom"}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"deployment.environment.name": "prod", "k8s.cluster.name": "from-env", "team": "a b"}; !maps.Equal(o.ResourceAttributes, want) || o.ServiceName != "custom" {
		t.Errorf("attributes %v service %q", o.ResourceAttributes, o.ServiceName)
	}
}

// TestTracerSettings: the sampler and span limits the exporter gives the
// tracer provider, as the SDK would read them: the span-specific limit
// over the general one, the defaults where unset.
func TestTracerSettings(t *testing.T) {
	o, err := ResolveOTel(MapEnv(nil), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if o.Sampler != "" || o.SamplerArg != 1 || o.SpanLimits != DefaultSpanLimits {
		t.Errorf("defaults: sampler %q %v limits %+v", o.Sampler, o.SamplerArg, o.SpanLimits)
	}
	o, err = ResolveOTel(MapEnv(map[string]string{
		"OTEL_TRACES_SAMPLER":                    "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":                "0.25",
		"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT":      "100",
		"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "50",
		"OTEL_ATTRIBUTE_COUNT_LIMIT":             "20",
		"OTEL_SPAN_EVENT_COUNT_LIMIT":            "3",
		"OTEL_SPAN_LINK_COUNT_LIMIT":             "-1",
		"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT":       "4",
		"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT":        "5",
	}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := (SpanLimits{50, 20, 3, -1, 4, 5}); o.Sampler != "parentbased_traceidratio" || o.SamplerArg != 0.25 || o.SpanLimits != want {
		t.Errorf("sampler %q %v limits %+v, want %+v", o.Sampler, o.SamplerArg, o.SpanLimits, want)
	}
	for _, env := range []map[string]string{{"OTEL_TRACES_SAMPLER": "sometimes"}, {"OTEL_TRACES_SAMPLER_ARG": "2"}, {"OTEL_SPAN_EVENT_COUNT_LIMIT": "many"}} {
		if _, err := ResolveOTel(MapEnv(env), "", ""); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}

// TestAPIToken: the API's bearer token from --api-token-file (surrounding
// whitespace, a Secret's trailing newline, dropped), else
// $BPFLEET_API_TOKEN; an empty or missing file is refused, naming the flag.
// (internal/config is its one reader: api takes Options.Token.)
func TestAPIToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	os.WriteFile(file, []byte("s3cr3t-token-0123456789\n"), 0o600)
	os.WriteFile(empty, []byte(" \n"), 0o600)
	for _, tc := range []struct {
		file, env, want string
		refused         bool
	}{
		{file: file, env: "from-env-0123456789", want: "s3cr3t-token-0123456789"},
		{env: " from-env-0123456789 ", want: "from-env-0123456789"},
		{},
		{file: empty, refused: true},
		{file: filepath.Join(dir, "missing"), refused: true},
	} {
		c := agentWith(func(c *Agent) { c.APITokenFile = tc.file })
		err := c.Resolve(MapEnv(map[string]string{"BPFLEET_API_TOKEN": tc.env}))
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "--api-token-file") {
				t.Errorf("file %s: %v, want refused naming --api-token-file", tc.file, err)
			}
			continue
		}
		if err != nil || c.APIToken != tc.want {
			t.Errorf("file %q env %q: token %q, %v; want %q", tc.file, tc.env, c.APIToken, err, tc.want)
		}
	}
}
