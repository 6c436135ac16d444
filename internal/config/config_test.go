package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func agentWith(mod func(*Agent)) Agent {
	c := DefaultAgent()
	c.ClusterName = ""
	if mod != nil {
		mod(&c)
	}
	return c
}

// TestAgentResolve: valid settings resolve to what the agent will really
// use; every bad one is one line naming its flag or variable.
func TestAgentResolve(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("0123456789abcdef\n"), 0o600)

	for _, tc := range []struct {
		name string
		mod  func(*Agent)
		env  map[string]string
		want []string // names of the problems, in any order; none: valid
	}{
		{name: "defaults"},
		{name: "interval at the minimum", mod: func(c *Agent) { c.Interval = MinScanInterval }},
		{name: "interval below", mod: func(c *Agent) { c.Interval = time.Nanosecond }, want: []string{"--interval"}},
		{name: "export interval below", mod: func(c *Agent) { c.ExportInterval = 100 * time.Millisecond }, want: []string{"--export-interval"}},
		{name: "maps every scan", mod: func(c *Agent) { c.MapInterval = 0 }},
		{name: "map interval negative", mod: func(c *Agent) { c.MapInterval = -time.Second }, want: []string{"--map-interval"}},
		{name: "resend negative", mod: func(c *Agent) { c.ResendUnchanged = -time.Second }, want: []string{"--resend-unchanged"}},
		{name: "env export interval below", env: map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "100"}, want: []string{"OTEL_METRIC_EXPORT_INTERVAL"}},
		{name: "env export interval overridden by flag", mod: func(c *Agent) { c.ExportInterval = time.Second }, env: map[string]string{"OTEL_METRIC_EXPORT_INTERVAL": "100"}},
		{name: "grpc host:port", mod: func(c *Agent) { c.OTLPEndpoint, c.OTLPProtocol = "collector:4317", "grpc" }},
		{name: "http host:port", mod: func(c *Agent) { c.OTLPEndpoint = "collector:4318" }, want: []string{"--otlp-endpoint"}},
		{name: "token file", mod: func(c *Agent) { c.APITokenFile, c.APIAddr = token, "0.0.0.0:9808" }},
		{name: "non-loopback without token", mod: func(c *Agent) { c.APIAddr = "0.0.0.0:9808" }, want: []string{"--api-addr"}},
		{name: "short env token", env: map[string]string{"BPFLEET_API_TOKEN": "abc"}, want: []string{"BPFLEET_API_TOKEN"}},
		{name: "api off", mod: func(c *Agent) { c.APIAddr = "" }},
		{name: "api port out of range", mod: func(c *Agent) { c.APIAddr = "127.0.0.1:70000" }, want: []string{"--api-addr"}},
		{name: "headers", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, X-Tenant=a%2Cb"}},
		{name: "header name with space", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "X Tenant=a"}, want: []string{"OTEL_EXPORTER_OTLP_HEADERS"}},
		{name: "trailing comma", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=b,"}, want: []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS"}},
		{name: "resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "k8s.cluster.name=prod,team=a%20b"}},
		{name: "bad resource attributes", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "=x"}, want: []string{"OTEL_RESOURCE_ATTRIBUTES"}},
		{name: "generic protocol reported once", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, want: []string{"OTEL_EXPORTER_OTLP_PROTOCOL"}},
		{name: "empty counts as unset", env: map[string]string{"OTEL_METRICS_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": " "}},
		{name: "prometheus", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, want: wantPrometheus()},
		{name: "fleet controls", mod: func(c *Agent) { c.LevelName, c.ProgramInfo, c.SpanBudget, c.Compression = "workload", true, 0, "none" }},
		{name: "bad fleet controls", mod: func(c *Agent) { c.SpanBudget, c.Compression = -1, "zstd" }, want: []string{"--span-budget", "--otlp-compression"}},
		{name: "miss budget 0", mod: func(c *Agent) { c.MissBudget = 0 }, want: []string{"--miss-budget"}},
		{name: "miss budget negative, watcher off: still refused", mod: func(c *Agent) { c.MissWatch, c.MissBudget = false, -3 }, want: []string{"--miss-budget"}},
		{name: "prometheus host and port", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "0.0.0.0", "OTEL_EXPORTER_PROMETHEUS_PORT": "9464"}},
		{name: "prometheus port not a port", env: map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "70000"}, want: []string{"OTEL_EXPORTER_PROMETHEUS_PORT"}},
		{name: "traces to prometheus", env: map[string]string{"OTEL_TRACES_EXPORTER": "prometheus"}, want: []string{"OTEL_TRACES_EXPORTER"}},
		{name: "stats sampled", mod: func(c *Agent) { c.Stats = Stats{Mode: StatsSampled, Window: time.Second, Period: 10 * time.Second} }},
		{name: "stats window the whole period", mod: func(c *Agent) { c.Stats = Stats{Mode: StatsSampled, Window: time.Second, Period: time.Second} }},
		{name: "stats off", mod: func(c *Agent) { c.Stats.Mode = StatsOff }},
		{name: "stats mode unknown", mod: func(c *Agent) { c.Stats.Mode = "sometimes" }, want: []string{"--stats"}},
		{name: "stats mode empty", mod: func(c *Agent) { c.Stats.Mode = "" }, want: []string{"--stats"}},
		{name: "stats window zero", mod: func(c *Agent) { c.Stats = Stats{Mode: StatsSampled, Period: time.Second} }, want: []string{"--stats-window"}},
		{name: "stats window over period", mod: func(c *Agent) {
			c.Stats = Stats{Mode: StatsSampled, Window: 20 * time.Second, Period: 10 * time.Second}
		}, want: []string{"--stats-window"}},
		{name: "stats period negative", mod: func(c *Agent) { c.Stats = Stats{Mode: StatsSampled, Window: time.Second, Period: -time.Second} }, want: []string{"--stats-period"}},
		{name: "stats window ignored unless sampled", mod: func(c *Agent) { c.Stats = Stats{Mode: StatsAlways} }},
		{name: "profile", mod: func(c *Agent) {
			c.Profile.Selectors = []string{"42", "id:42", "name:xdp_fw", "tag:abcd", "attach:xdp", "owner:cilium-x", "cilium-agent"}
		}},
		{name: "profile selectors", mod: func(c *Agent) { c.Profile.Selectors = []string{"", "id:x", "name:", "colour:red", "id:99999999999"} },
			want: []string{"--profile", "--profile", "--profile", "--profile", "--profile"}},
		{name: "profile every run", mod: func(c *Agent) { c.Profile.Window, c.Profile.Period = 0, 0 }},
		{name: "profile window negative", mod: func(c *Agent) { c.Profile.Window = -time.Second }, want: []string{"--profile-window"}},
		{name: "profile window not shorter", mod: func(c *Agent) { c.Profile.Window, c.Profile.Period = 10*time.Second, 10*time.Second }, want: []string{"--profile-window"}},
		{name: "node pool labels: a cluster's own", mod: func(c *Agent) {
			c.NodePoolLabels = []string{"example.com/pool", "pool", "node.kubernetes.io/pool_name.1"}
		}},
		{name: "node pool labels: none (do not read the node)", mod: func(c *Agent) { c.NodePoolLabels = nil }},
		{name: "node pool labels: not label keys", mod: func(c *Agent) {
			c.NodePoolLabels = []string{"", "a=b", "/pool", "Example.com/pool", "example.com/", "-pool", "pool-", "a/b/c", strings.Repeat("p", 64)}
		}, want: slices.Repeat([]string{"--node-pool-labels"}, 9)},
		{name: "pprof loopback", mod: func(c *Agent) { c.Pprof = "127.0.0.1:6060" }},
		{name: "pprof any port", mod: func(c *Agent) { c.Pprof = "[::1]:0" }},
		{name: "pprof not loopback", mod: func(c *Agent) { c.Pprof = "0.0.0.0:6060" }, want: []string{"--pprof"}},
		{name: "pprof no host", mod: func(c *Agent) { c.Pprof = ":6060" }, want: []string{"--pprof"}},
		{name: "pprof not host:port", mod: func(c *Agent) { c.Pprof = "6060" }, want: []string{"--pprof"}},
		{name: "pprof port", mod: func(c *Agent) { c.Pprof = "localhost:http" }, want: []string{"--pprof"}},
		{name: "everything wrong at once", mod: func(c *Agent) {
			c.Interval, c.LevelName, c.MaxPrograms, c.Scan.QuietIntervals = 0, "pods", -1, 0
			c.Stats, c.Profile, c.Pprof = Stats{Mode: StatsSampled}, Profile{Selectors: []string{"id:x"}, Window: -1}, "0.0.0.0:6060"
		}, env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
			want: []string{"--interval", "--metrics-level", "--max-programs", "--quiet-intervals", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_COMPRESSION",
				"--stats-window", "--stats-period", "--profile", "--profile-window", "--pprof"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := agentWith(tc.mod)
			err := c.Resolve(MapEnv(tc.env))
			got := problemNames(t, err)
			if strings.Join(sorted(got), " ") != strings.Join(sorted(tc.want), " ") {
				t.Errorf("problems %v, want %v: %v", got, tc.want, err)
			}
			if err != nil && !IsUsage(err) {
				t.Errorf("%v is not a usage error", err)
			}
		})
	}
}

func wantPrometheus() []string {
	if prometheusSupported {
		return nil
	}
	return []string{"OTEL_METRICS_EXPORTER"}
}

// problemNames checks every line of err is one Problem and returns their
// names.
func problemNames(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var names []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case *Problem:
			if strings.Contains(e.Error(), "\n") {
				t.Errorf("problem spans lines: %q", e.Error())
			}
			names = append(names, e.Name)
		default:
			t.Errorf("%T %v is not a Problem", err, err)
		}
	}
	walk(err)
	if n := strings.Count(err.Error(), "\n") + 1; n != len(names) {
		t.Errorf("%d lines for %d problems: %q", n, len(names), err.Error())
	}
	return names
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// TestResolvedSignals: the endpoint, protocol and interval the agent logs
// are the ones the exporter is given.
func TestResolvedSignals(t *testing.T) {
	c := agentWith(nil)
	err := c.Resolve(MapEnv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://collector:4318/",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://jaeger:4317",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_TIMEOUT":         "2500",
		"OTEL_EXPORTER_OTLP_COMPRESSION":     "gzip",
		"OTEL_METRIC_EXPORT_INTERVAL":        "30000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	m, tr := c.OTel.Metrics, c.OTel.Traces
	if m.Endpoint != "http://collector:4318/v1/metrics" || m.Protocol != ProtocolHTTP || m.EndpointFrom != "OTEL_EXPORTER_OTLP_ENDPOINT" {
		t.Errorf("metrics %+v", m)
	}
	if tr.Endpoint != "http://jaeger:4317" || tr.Protocol != ProtocolGRPC || tr.EndpointFrom != "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" {
		t.Errorf("traces %+v", tr)
	}
	if m.Timeout != 2500*time.Millisecond || m.Compression != CompressionGzip {
		t.Errorf("metrics timeout %v compression %s", m.Timeout, m.Compression)
	}
	if got := c.EffectiveExportInterval(); got != 30*time.Second {
		t.Errorf("export interval %v, want 30s from OTEL_METRIC_EXPORT_INTERVAL", got)
	}

	c = agentWith(func(c *Agent) { c.OTLPEndpoint, c.OTLPProtocol = "otel:4317", "grpc" })
	if err := c.Resolve(MapEnv(map[string]string{"OTEL_SDK_DISABLED": "true"})); err != nil {
		t.Fatal(err)
	}
	if c.OTel.Endpoint != "http://otel:4317" || c.OTel.Metrics.Exporter != ExporterNone || c.OTel.Traces.Exporter != ExporterNone {
		t.Errorf("grpc host:port with the SDK disabled: %+v", c.OTel)
	}
}

// TestToolsValidate covers list, top, probe and bench (its plain fields).
func TestToolsValidate(t *testing.T) {
	scan := DefaultScan()
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"list ok", (&List{Scan: scan, Output: "table"}).Validate(), nil},
		{"list watch count", (&List{Scan: scan, Output: "jsonl", Watch: true, Interval: time.Second, Count: -1}).Validate(), []string{"--count"}},
		{"list count without watch", (&List{Scan: scan, Output: "json", Count: 3, CountSet: true}).Validate(), []string{"--count"}},
		{"top ok", (&Top{Scan: scan, Interval: time.Second, Sort: "cpu"}).Validate(), nil},
		{"top remote", (&Top{Scan: scan, Interval: time.Second, Sort: "cpu", Remote: "unix:///x"}).Validate(), []string{"--remote"}},
		{"top all", (&Top{Scan: scan, Interval: time.Millisecond, Sort: "x", Count: -1, Profile: []string{"id:"}}).Validate(), []string{"--interval", "--sort", "--count", "--profile"}},
		{"profile ok", (&Profiler{Scan: scan, Interval: time.Second, Profile: Profile{Selectors: []string{"xdp_fw"}, Period: 10 * time.Second}}).Validate(), nil},
		{"profile windowed", (&Profiler{Scan: scan, Interval: time.Second, Profile: Profile{Selectors: []string{"id:7"}, Window: time.Second, Period: 10 * time.Second}}).Validate(), nil},
		{"profile all", (&Profiler{Scan: scan, Interval: 0, Count: -1, Profile: Profile{Selectors: []string{"id:x", "tag:"}, Window: 2 * time.Second, Period: time.Second}}).Validate(),
			[]string{"--interval", "--count", "PROG", "PROG", "--window"}},
		{"probe", (&Probe{Output: "xml"}).Validate(), []string{"--output"}},
		// The attach types, mode and stats: cmd/bpfleet's TestBenchOptions.
		{"bench ok", (&Bench{Mode: "auto", Stats: "off", Rounds: 5, Batch: 1, Output: "json", AttachTypes: "raw_tp, tp_btf"}).Validate(), nil},
		{"bench all", (&Bench{Mode: "x", Stats: "x", Calls: -1, Output: "x", AttachTypes: "nope"}).Validate(), []string{"--calls", "--rounds", "--batch", "--output"}},
	} {
		got := problemNames(t, tc.err)
		if strings.Join(sorted(got), " ") != strings.Join(sorted(tc.want), " ") {
			t.Errorf("%s: problems %v, want %v: %v", tc.name, got, tc.want, tc.err)
		}
	}
}

func TestUsage(t *testing.T) {
	if !IsUsage(Usage(errors.New("unknown flag: --x"))) || IsUsage(errors.New("listening: address in use")) || Usage(nil) != nil {
		t.Error("Usage/IsUsage")
	}
	if !IsUsage(errors.Join(errors.New("x"), &Problem{Name: "--a"})) {
		t.Error("a joined Problem is a usage error")
	}
}

// TestResolvedCompression: the compression the start-up line reports is the
// one the exporter sends: gzip unless the environment or the flag says none,
// the flag winning over the environment.
func TestResolvedCompression(t *testing.T) {
	for _, c := range []struct {
		env, flag string
		want      Compression
	}{
		{"", "", CompressionGzip},
		{"none", "", CompressionNone},
		{"gzip", "", CompressionGzip},
		{"gzip", "none", CompressionNone},
		{"none", "gzip", CompressionGzip},
	} {
		a := agentWith(func(a *Agent) { a.Compression = c.flag })
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
		if c.env != "" {
			env["OTEL_EXPORTER_OTLP_COMPRESSION"] = c.env
		}
		if err := a.Resolve(MapEnv(env)); err != nil {
			t.Fatal(err)
		}
		if a.OTel.Metrics.Compression != c.want || a.OTel.Traces.Compression != c.want {
			t.Errorf("env %q flag %q: metrics %s traces %s, want %s", c.env, c.flag, a.OTel.Metrics.Compression, a.OTel.Traces.Compression, c.want)
		}
	}
}

func TestSpanQueue(t *testing.T) {
	def := SpanQueue{DefaultSpanQueueSize, DefaultSpanQueueBatch, DefaultSpanQueueDelay, DefaultSpanQueueTimeout}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want SpanQueue
	}{
		{"unset: the spec's defaults", nil, def},
		{"every variable", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10", "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BSP_EXPORT_TIMEOUT": "0"},
			SpanQueue{100, 10, 200 * time.Millisecond, 0}},
		{"a batch larger than the queue is the queue", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "8"}, SpanQueue{8, 8, DefaultSpanQueueDelay, DefaultSpanQueueTimeout}},
		{"malformed keeps the default", map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "big", "OTEL_BSP_SCHEDULE_DELAY": "-1"}, def},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolveSpanQueue(func(k string) string { return tc.env[k] })
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHealthConfig(t *testing.T) {
	for _, tc := range []struct {
		h        Health
		bad      string // the flag the error names; "" for valid
		dialAddr string
	}{
		{DefaultHealth(), "", "127.0.0.1:9808"},
		{Health{APIAddr: "0.0.0.0:9900", Timeout: time.Second}, "", "127.0.0.1:9900"},
		{Health{APIAddr: "[::]:9900", Timeout: time.Second}, "", "[::1]:9900"},
		{Health{APIAddr: ":9900", Timeout: time.Second}, "", "127.0.0.1:9900"},
		{Health{APIAddr: "[::1]:9808", Timeout: time.Second}, "", "[::1]:9808"},
		{Health{APIAddr: "9808", Timeout: time.Second}, "--api-addr", ""},
		{Health{APIAddr: "node:9808", Timeout: time.Second}, "--api-addr", ""},
		{Health{APIAddr: "127.0.0.1:0", Timeout: time.Second}, "--api-addr", ""},
		{Health{APIAddr: "127.0.0.1:9808", Timeout: 0}, "--timeout", ""},
		{Health{APIAddr: "127.0.0.1:9808", Timeout: 2 * MaxHealthTimeout}, "--timeout", ""},
	} {
		err := tc.h.Validate()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%+v: %v", tc.h, err)
		case tc.bad != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.bad+"=") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%+v: error %v, want one line naming %s", tc.h, err, tc.bad)
		case tc.bad == "" && tc.h.DialAddr() != tc.dialAddr:
			t.Errorf("%+v: dials %s, want %s", tc.h, tc.h.DialAddr(), tc.dialAddr)
		}
	}
	if LivenessBound(time.Second) != MinLivenessBound || LivenessBound(time.Minute) != 3*time.Minute {
		t.Errorf("liveness bounds %v %v", LivenessBound(time.Second), LivenessBound(time.Minute))
	}
}

// TestCacheDirFrom: $BPFLEET_CACHE_DIR names the CO-RE cache; unset or
// empty, the user cache directory's bpfleet, as the probes chose it when
// they read the variable themselves.
func TestCacheDirFrom(t *testing.T) {
	if got := CacheDirFrom(MapEnv(map[string]string{CacheDirEnv: "/tmp/bpfleet"})); got != "/tmp/bpfleet" {
		t.Errorf("%s=/tmp/bpfleet: cache dir %q", CacheDirEnv, got)
	}
	user, err := os.UserCacheDir()
	if err != nil {
		t.Skip(err)
	}
	for _, env := range []map[string]string{{}, {CacheDirEnv: ""}} {
		if got, want := CacheDirFrom(MapEnv(env)), filepath.Join(user, "bpfleet"); got != want {
			t.Errorf("env %v: cache dir %q, want %q", env, got, want)
		}
	}
}
