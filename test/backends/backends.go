// Package backends starts the real OTLP backends bpfleet's tests talk
// to — Prometheus (with its OTLP receiver, optionally scraping), promtool,
// Jaeger v2 and an OpenTelemetry Collector in front of them — from the
// binaries scripts/build-backends.sh puts in ${BPFLEET_CACHE}/bin, each on
// free loopback ports, and queries them through their own HTTP APIs.
package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/syncbuf"
)

// Pinned versions; scripts/build-backends.sh builds exactly these.
const (
	PrometheusVersion = "v0.316.0"
	JaegerVersion     = "v1.75.0"
	OtelcolVersion    = "v0.165.0"
)

// Bin returns the path of a cached backend binary, or fails the test with
// what to run: a missing backend is a broken setup, never a skip.
func Bin(t testing.TB, name, version string) string {
	t.Helper()
	cache := os.Getenv("BPFLEET_CACHE")
	if cache == "" {
		cache = "/var/cache/bpfleet"
	}
	p := filepath.Join(cache, "bin", name+"-"+version)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s %s not found at %s: run scripts/build-backends.sh", name, version, p)
	}
	return p
}

// FreePort returns a loopback port nothing listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// process is a backend child process whose output is kept for failure
// messages.
type process struct {
	name string
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

func start(name string, bin string, args ...string) (*process, error) {
	p := &process{name: name, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	// The backends must not trace themselves: Jaeger would send its own
	// spans to the default 127.0.0.1:4317 (whoever listens there) and wait
	// out retries on shutdown.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "OTEL_SDK_DISABLED=true", "OTEL_TRACES_EXPORTER=none")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop ends the process with SIGTERM (a clean shutdown: Prometheus writes
// its head), SIGKILL after 20s.
func (p *process) stop() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	// Our own keep-alive connections would hold up a graceful shutdown.
	http.DefaultClient.CloseIdleConnections()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitHTTP polls url until it answers 200, the process dies or 60s pass.
func (p *process) waitHTTP(u string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, tail(p.out.String()))
		default:
		}
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready at %s after 60s: %s", p.name, u, tail(p.out.String()))
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// Prometheus is a running Prometheus with its OTLP receiver on.
type Prometheus struct {
	queryAPI
	Addr    string
	dataDir string
	config  string
	bin     string
	proc    *process
	// cfg and scrape are the configuration less its rule_files (SetRules
	// writes those).
	cfg, scrape string
}

// prometheusConfig keeps the OTLP receiver's defaults except that it
// promotes the node facts to labels and accepts slightly late samples (an
// agent retrying after an outage).
const prometheusConfig = `global:
  evaluation_interval: 1s
otlp:
  promote_resource_attributes: [service.instance.id, host.name, os.version, host.cpu.model.name, k8s.node.name]
storage:
  tsdb:
    out_of_order_time_window: 30m
`

// ScrapeTarget is an endpoint Prometheus scrapes every second, as a
// PodMonitor / ServiceMonitor would have it scrape an agent pod.
type ScrapeTarget struct {
	// Addr is host:port of the /metrics endpoint.
	Addr string
	// Instance replaces the instance label (host:port by default), as the
	// chart's ServiceMonitor sets it to the node's name.
	Instance string
}

// StartPrometheus starts Prometheus on a free loopback port with a data
// directory in t.TempDir(), scraping the given targets (job bpfleet-agent);
// it is stopped when the test ends.
func StartPrometheus(t testing.TB, scrape ...ScrapeTarget) *Prometheus {
	t.Helper()
	return StartPrometheusWithRules(t, nil, scrape...)
}

// StartPrometheusWithRules is StartPrometheus evaluating the given rule
// files (every second, the global evaluation_interval): the alerts they
// fire are in the ALERTS series.
func StartPrometheusWithRules(t testing.TB, rules []string, scrape ...ScrapeTarget) *Prometheus {
	t.Helper()
	return startPrometheus(t, prometheusConfig, rules, scrape)
}

// StartPrometheusWithRulesEvery is StartPrometheusWithRules evaluating
// them every interval instead: a fleet's Prometheus evaluates at 30 s to
// 1 m (its default is 1 m), and a bench that compresses time into fewer
// wall seconds than it stands for would otherwise count more evaluations
// per export the longer a round takes.
func StartPrometheusWithRulesEvery(t testing.TB, rules []string, interval time.Duration) *Prometheus {
	t.Helper()
	cfg := strings.Replace(prometheusConfig, "evaluation_interval: 1s", "evaluation_interval: "+interval.String(), 1)
	if cfg == prometheusConfig && interval != time.Second {
		t.Fatal("prometheusConfig has no evaluation_interval line to replace")
	}
	return startPrometheus(t, cfg, rules, nil)
}

// StartPrometheusPromotingAll is StartPrometheus with every OTLP resource
// attribute promoted to a label, as some backends keep them: an attribute
// that changes with the agent's pod or release shows as a new set of
// series.
func StartPrometheusPromotingAll(t testing.TB) *Prometheus {
	t.Helper()
	cfg := strings.Replace(prometheusConfig, "promote_resource_attributes: [service.instance.id, host.name, os.version, host.cpu.model.name, k8s.node.name]", "promote_all_resource_attributes: true", 1)
	if cfg == prometheusConfig {
		t.Fatal("prometheusConfig has no promote_resource_attributes line to replace")
	}
	return startPrometheus(t, cfg, nil, nil)
}

func startPrometheus(t testing.TB, cfg string, rules []string, scrape []ScrapeTarget) *Prometheus {
	t.Helper()
	dir := t.TempDir()
	p := &Prometheus{
		Addr:    "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		dataDir: filepath.Join(dir, "data"),
		config:  filepath.Join(dir, "prometheus.yml"),
		bin:     Bin(t, "prometheus", PrometheusVersion),
	}
	p.queryAPI = queryAPI("http://" + p.Addr)
	p.cfg = cfg
	if len(scrape) > 0 {
		p.scrape = "scrape_configs:\n"
		for i, s := range scrape {
			p.scrape += fmt.Sprintf("  - job_name: bpfleet-agent-%d\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    static_configs:\n      - targets: [%q]\n", i, s.Addr)
			p.scrape += "    relabel_configs:\n      - target_label: job\n        replacement: bpfleet-agent\n"
			if s.Instance != "" {
				p.scrape += fmt.Sprintf("      - target_label: instance\n        replacement: %q\n", s.Instance)
			}
		}
	}
	if err := p.writeConfig(rules); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start (re)starts Prometheus on the same address and data directory.
func (p *Prometheus) Start() error {
	proc, err := start("prometheus", p.bin,
		"--config.file="+p.config,
		"--storage.tsdb.path="+p.dataDir,
		"--web.listen-address="+p.Addr,
		"--web.enable-otlp-receiver",
		// The agent sends each counter's start time (a program's load
		// time); with this Prometheus writes a zero sample there, so
		// increase() counts a new program's first interval.
		"--enable-feature=created-timestamp-zero-ingestion",
		"--log.level=warn",
	)
	if err != nil {
		return err
	}
	p.proc = proc
	return proc.waitHTTP("http://" + p.Addr + "/-/ready")
}

// Stop shuts Prometheus down cleanly.
func (p *Prometheus) Stop() { p.proc.stop() }

// writeConfig writes the configuration with the given rule files.
func (p *Prometheus) writeConfig(rules []string) error {
	cfg := p.cfg
	if len(rules) > 0 {
		cfg += "rule_files:\n"
		for _, r := range rules {
			abs, err := filepath.Abs(r)
			if err != nil {
				return err
			}
			cfg += fmt.Sprintf("  - %q\n", abs)
		}
	}
	return os.WriteFile(p.config, []byte(cfg+p.scrape), 0o644)
}

// SetRules makes Prometheus evaluate the given rule files from now on
// (none: no rule is evaluated) without a restart: the configuration is
// rewritten and reloaded (SIGHUP), as a bench that measures what the
// rules cost compares windows with and without them on one head.
func (p *Prometheus) SetRules(rules []string) error {
	if err := p.writeConfig(rules); err != nil {
		return err
	}
	if err := p.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("prometheus: reload: %w", err)
	}
	return Eventually(30*time.Second, func() error {
		var body struct {
			Data struct {
				Groups []json.RawMessage `json:"groups"`
			} `json:"data"`
		}
		if err := getJSON(context.Background(), "http://"+p.Addr+"/api/v1/rules", &body); err != nil {
			return err
		}
		if got := len(body.Data.Groups); (got > 0) != (len(rules) > 0) {
			return fmt.Errorf("prometheus: %d rule groups after reloading with %d rule files: %s", got, len(rules), tail(p.proc.out.String()))
		}
		return nil
	})
}

// Log is Prometheus' output so far.
func (p *Prometheus) Log() string { return p.proc.out.String() }

// OTLPEndpoint is the OTLP/HTTP metrics URL (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT).
func (p *Prometheus) OTLPEndpoint() string {
	return "http://" + p.Addr + "/api/v1/otlp/v1/metrics"
}

// Jaeger is a running Jaeger v2 all-in-one with in-memory storage.
type Jaeger struct {
	OTLPGRPC, OTLPHTTP, QueryAddr string
	proc                          *process
}

const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    enable_tracing: false
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 200000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// StartJaeger starts Jaeger on free loopback ports; it is stopped when the
// test ends.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(FreePort(t)) }
	j := &Jaeger{OTLPGRPC: port(), OTLPHTTP: port(), QueryAddr: port()}
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, j.QueryAddr, port(), j.OTLPGRPC, j.OTLPHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := start("jaeger", Bin(t, "jaeger", JaegerVersion), "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	j.proc = proc
	t.Cleanup(proc.stop)
	if err := proc.waitHTTP("http://" + j.QueryAddr + "/api/services"); err != nil {
		t.Fatal(err)
	}
	return j
}

// Log is Jaeger's output so far.
func (j *Jaeger) Log() string { return j.proc.out.String() }

// Span is a span as Jaeger's query API returns it, tags flattened.
type Span struct {
	TraceID       string
	OperationName string
	Start         time.Time
	Duration      time.Duration
	Tags          map[string]any
	Events        int
	// EventAttrs are the events' attributes (Jaeger's log fields; the
	// event's name under "event"), in the span's order.
	EventAttrs []map[string]any
	Process    map[string]any
}

// Spans returns the spans of service's traces that carry every given tag
// (Jaeger's tags filter, values as strings).
func (j *Jaeger) Spans(ctx context.Context, service string, tags map[string]string) ([]Span, error) {
	// limit is how many traces one query returns at most: a result of
	// exactly that many may be cut short, so it is an error, not an
	// answer (an hour-long soak's 5,756 single-span traces once came back
	// as 5,000 and read as lost spans).
	const limit = 100_000 // below the storage's max_traces, as Jaeger requires
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(limit)}}
	if len(tags) > 0 {
		b, _ := json.Marshal(tags)
		q.Set("tags", string(b))
	}
	type kv struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	}
	var body struct {
		Data []struct {
			TraceID string `json:"traceID"`
			Spans   []struct {
				OperationName string `json:"operationName"`
				StartTime     int64  `json:"startTime"` // µs
				Duration      int64  `json:"duration"`  // µs
				Tags          []kv   `json:"tags"`
				Logs          []struct {
					Fields []kv `json:"fields"`
				} `json:"logs"`
				ProcessID string `json:"processID"`
			} `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
				Tags        []kv   `json:"tags"`
			} `json:"processes"`
		} `json:"data"`
		Errors any `json:"errors"`
	}
	if err := getJSON(ctx, "http://"+j.QueryAddr+"/api/traces?"+q.Encode(), &body); err != nil {
		return nil, err
	}
	if body.Errors != nil {
		return nil, fmt.Errorf("jaeger: %v", body.Errors)
	}
	if len(body.Data) >= limit {
		return nil, fmt.Errorf("jaeger: %d traces, the query's limit: the answer may be cut short", len(body.Data))
	}
	var out []Span
	for _, tr := range body.Data {
		for _, s := range tr.Spans {
			sp := Span{TraceID: tr.TraceID, OperationName: s.OperationName,
				Start: time.UnixMicro(s.StartTime), Duration: time.Duration(s.Duration) * time.Microsecond,
				Tags: map[string]any{}, Events: len(s.Logs), Process: map[string]any{}}
			for _, t := range s.Tags {
				sp.Tags[t.Key] = t.Value
			}
			for _, l := range s.Logs {
				ev := map[string]any{}
				for _, f := range l.Fields {
					ev[f.Key] = f.Value
				}
				sp.EventAttrs = append(sp.EventAttrs, ev)
			}
			proc := tr.Processes[s.ProcessID]
			sp.Process["service.name"] = proc.ServiceName
			for _, t := range proc.Tags {
				sp.Process[t.Key] = t.Value
			}
			out = append(out, sp)
		}
	}
	return out, nil
}

// Collector is a running OpenTelemetry Collector (otlp receiver → batch →
// OTLP/HTTP to Prometheus for metrics, OTLP/gRPC to Jaeger for traces): the
// gateway a fleet puts between its agents and its backends.
type Collector struct {
	OTLPGRPC, OTLPHTTP string
	proc               *process
	bin, config        string
}

// collectorConfig is the gateway's configuration: one otlp_http exporter
// per metrics URL (each store gets every batch; a store that is away
// holds up only its own exporter's queue) and Jaeger for the traces, or
// no traces pipeline with jaeger "".
func collectorConfig(grpc, http, jaeger string, metricsURLs []string) string {
	var exporters, names strings.Builder
	for i, u := range metricsURLs {
		fmt.Fprintf(&exporters, "  otlp_http/metrics%d:\n    metrics_endpoint: %s\n", i, u)
		if i > 0 {
			names.WriteString(", ")
		}
		fmt.Fprintf(&names, "otlp_http/metrics%d", i)
	}
	traces := ""
	if jaeger != "" {
		traces = fmt.Sprintf(`  otlp_grpc/jaeger:
    endpoint: %s
    tls:
      insecure: true
`, jaeger)
	}
	s := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 200ms
exporters:
%s%sservice:
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [batch]
      exporters: [%s]
`, grpc, http, exporters.String(), traces, names.String())
	if jaeger != "" {
		s += `    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc/jaeger]
`
	}
	return s + `  telemetry:
    metrics:
      level: none
    logs:
      level: warn
`
}

// StartCollector starts the Collector on free loopback ports, forwarding
// metrics to prom's OTLP receiver and traces to jg's OTLP/gRPC port; it is
// stopped when the test ends.
func StartCollector(t testing.TB, prom *Prometheus, jg *Jaeger) *Collector {
	t.Helper()
	return StartGateway(t, jg, prom.OTLPEndpoint())
}

// StartGateway is StartCollector sending the metrics to every one of the
// OTLP/HTTP metrics URLs (Prometheus' and VictoriaMetrics' OTLPEndpoint),
// and traces to jg, or nowhere with jg nil (the agents then send none).
func StartGateway(t testing.TB, jg *Jaeger, metricsURLs ...string) *Collector {
	t.Helper()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(FreePort(t)) }
	c := &Collector{OTLPGRPC: port(), OTLPHTTP: port()}
	jaeger := ""
	if jg != nil {
		jaeger = jg.OTLPGRPC
	}
	cfg := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(cfg, []byte(collectorConfig(c.OTLPGRPC, c.OTLPHTTP, jaeger, metricsURLs)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.bin, c.config = Bin(t, "otelcol", OtelcolVersion), cfg
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.proc.stop() })
	return c
}

// Start starts the Collector (again, after Kill) on its ports and waits
// until both accept connections: the receiver has no health endpoint.
func (c *Collector) Start() error {
	proc, err := start("otelcol", c.bin, "--config", c.config)
	if err != nil {
		return err
	}
	c.proc = proc
	for _, addr := range []string{c.OTLPGRPC, c.OTLPHTTP} {
		if err := proc.waitListen(addr); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the Collector with SIGTERM, as a rollout or a node drain
// does: it stops receiving and forwards what it holds before it exits.
// (A SIGKILL would lose what it had accepted and not yet forwarded, which
// no sender can count.)
func (c *Collector) Stop() { c.proc.stop() }

// PID is the Collector process's id, for measuring its CPU and memory.
func (c *Collector) PID() int { return c.proc.cmd.Process.Pid }

// Log is the Collector's output so far.
func (c *Collector) Log() string { return c.proc.out.String() }

// waitListen waits until addr accepts TCP connections, the process dies or
// 60s pass.
func (p *process) waitListen(addr string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %s", p.name, tail(p.out.String()))
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening on %s after 60s: %s", p.name, addr, tail(p.out.String()))
}

// ErrTimeout is returned by Eventually when the condition never held.
var ErrTimeout = errors.New("condition not met in time")

// Eventually polls f every 250ms until it returns nil or timeout passes,
// then returns f's last error.
func Eventually(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %v: %v", ErrTimeout, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
