package backends

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// VictoriaMetricsVersion is the release of victoria-metrics, vmagent,
// vmalert, vmalert-tool and vmauth that scripts/build-backends.sh builds.
const VictoriaMetricsVersion = "v1.151.0"

// VictoriaMetrics is a multi-node VictoriaMetrics in the shape its docs
// give for high availability with single-node stores (the cluster
// binaries are not available as Go modules):
//
//	gateway Collector ─OTLP/HTTP→ vmagent ─remote write→ every storage node
//	reads (tests, vmalert) → vmauth → the first storage node that answers
//
// Replicated, not sharded: every node holds every series, so any one node
// answers any query in full and vmauth only has to fail over. Sharding
// over single-node stores would leave each query seeing one shard, with
// nothing to merge them (vmselect is cluster-only). vmagent keeps on disk
// what a node that is away has not taken, and sends it when it is back.
// vmalert evaluates the rules through vmauth and writes recording rules
// and ALERTS back through vmagent, so they are replicated too.
//
// Query, Series, RawSamples and MetricNames go through vmauth.
type VictoriaMetrics struct {
	queryAPI
	// Nodes are the storage nodes, each queryable on its own.
	Nodes []*VMNode
	// AgentAddr is vmagent's, AuthAddr vmauth's, AlertAddr vmalert's
	// (empty without rules) host:port.
	AgentAddr, AuthAddr, AlertAddr string

	agent, auth, alert *process
}

// VMNode is one single-node victoria-metrics storage node.
type VMNode struct {
	queryAPI
	Addr    string
	bin     string
	dataDir string
	proc    *process
}

// VMResourceAttributes are the resource attributes vmagent keeps as labels,
// as Prometheus promotes them (prometheusConfig) plus the two it turns into
// job and instance; the rest (the SDK's version, the agent's own
// attributes) would be in every series' identity and start new series
// with every agent upgrade.
var VMResourceAttributes = []string{"service.name", "service.namespace", "service.instance.id", "host.name", "os.version", "host.cpu.model.name", "k8s.node.name", "k8s.nodepool.name"}

// vmRelabel turns the OTLP resource's service attributes into job and
// instance as Prometheus' OTLP receiver does (job: service.namespace/
// service.name, or service.name alone; instance: service.instance.id), so
// the rules and dashboards select and group the same labels on both stores.
// service_instance_id stays, as Prometheus promotes it (prometheusConfig):
// every series then has the same labels in both.
// Only where the attributes are there: vmalert's recording rules and
// ALERTS come through vmagent too, with job and instance already set.
const vmRelabel = `- source_labels: [service_name]
  regex: "(.+)"
  target_label: job
- source_labels: [service_namespace, service_name]
  regex: "(.+);(.+)"
  replacement: "$1/$2"
  target_label: job
- source_labels: [service_instance_id]
  regex: "(.+)"
  target_label: instance
- action: labeldrop
  regex: "service_name|service_namespace"
`

// VMAgentFlags are the OTLP flags vmagent (or a storage node taking OTLP
// itself) needs for the shipped rules and dashboards; relabel is the path
// of vmRelabel's file. charts/bpfleet/README.md lists them.
func VMAgentFlags(relabel string) []string {
	return []string{
		// bpf.program.run_time (unit s, a counter) as
		// bpf_program_run_time_seconds_total, attributes with _ for .
		"-opentelemetry.usePrometheusNaming",
		"-opentelemetry.promoteAllResourceAttributes=false",
		"-opentelemetry.promoteResourceAttributes=" + strings.Join(VMResourceAttributes, ","),
		// Prometheus keeps no otel_scope_* labels by default either.
		"-opentelemetry.promoteScopeMetadata=false",
		"-remoteWrite.relabelConfig=" + relabel,
	}
}

// VMConfig is a VictoriaMetrics set-up.
type VMConfig struct {
	// Nodes is the number of storage nodes (at least 2).
	Nodes int
	// Rules are rule files for vmalert (none: no vmalert).
	Rules []string
}

// StartVictoriaMetrics starts the storage nodes, vmagent, vmauth and (with
// rules) vmalert on free loopback ports, with their data in t.TempDir();
// they are stopped when the test ends.
func StartVictoriaMetrics(t testing.TB, cfg VMConfig) *VictoriaMetrics {
	t.Helper()
	if cfg.Nodes < 2 {
		t.Fatalf("VictoriaMetrics with %d storage nodes: want at least 2", cfg.Nodes)
	}
	dir := t.TempDir()
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(FreePort(t)) }
	v := &VictoriaMetrics{AgentAddr: addr(), AuthAddr: addr()}
	v.queryAPI = queryAPI("http://" + v.AuthAddr)
	bin := Bin(t, "victoria-metrics", VictoriaMetricsVersion)
	var writeURLs, readURLs []string
	for i := range cfg.Nodes {
		n := &VMNode{Addr: addr(), bin: bin, dataDir: filepath.Join(dir, fmt.Sprintf("storage%d", i))}
		n.queryAPI = queryAPI("http://" + n.Addr)
		v.Nodes = append(v.Nodes, n)
		t.Cleanup(n.Stop)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		writeURLs = append(writeURLs, "http://"+n.Addr+"/api/v1/write")
		readURLs = append(readURLs, "http://"+n.Addr+"/")
	}

	relabel := filepath.Join(dir, "relabel.yaml")
	if err := os.WriteFile(relabel, []byte(vmRelabel), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"-httpListenAddr=" + v.AgentAddr,
		"-remoteWrite.tmpDataPath=" + filepath.Join(dir, "vmagent"),
		// Retry a node that is away every 2s at most (1m by default), so
		// a test sees it catch up soon after it is back.
		"-remoteWrite.retryMaxInterval=2s",
		"-loggerLevel=WARN",
	}
	for _, u := range writeURLs {
		args = append(args, "-remoteWrite.url="+u)
	}
	args = append(args, VMAgentFlags(relabel)...)
	v.agent = startWaiting(t, "vmagent", Bin(t, "vmagent", VictoriaMetricsVersion), "http://"+v.AgentAddr+"/health", args...)

	// first_available: every read goes to the first node while it
	// answers, the next one when it does not.
	auth := fmt.Sprintf("unauthorized_user:\n  url_prefix: [%s]\n  load_balancing_policy: first_available\n  retry_status_codes: [500, 502, 503]\n",
		strings.Join(quoteAll(readURLs), ", "))
	authCfg := filepath.Join(dir, "vmauth.yaml")
	if err := os.WriteFile(authCfg, []byte(auth), 0o644); err != nil {
		t.Fatal(err)
	}
	v.auth = startWaiting(t, "vmauth", Bin(t, "vmauth", VictoriaMetricsVersion), "http://"+v.AuthAddr+"/api/v1/query?query=1",
		"-httpListenAddr="+v.AuthAddr, "-auth.config="+authCfg, "-loggerLevel=WARN")

	if len(cfg.Rules) > 0 {
		v.AlertAddr = addr()
		args := []string{
			"-httpListenAddr=" + v.AlertAddr,
			"-datasource.url=http://" + v.AuthAddr,
			"-remoteWrite.url=http://" + v.AgentAddr,
			"-remoteWrite.flushInterval=500ms",
			// As Prometheus in these tests: every second, no
			// alertgroup label, no Alertmanager.
			"-evaluationInterval=1s",
			"-disableAlertgroupLabel",
			"-notifier.blackhole",
			// The storage nodes run with -search.latencyOffset=0s.
			"-rule.evalDelay=0s",
			"-loggerLevel=WARN",
		}
		for _, r := range cfg.Rules {
			abs, err := filepath.Abs(r)
			if err != nil {
				t.Fatal(err)
			}
			args = append(args, "-rule="+abs)
		}
		v.alert = startWaiting(t, "vmalert", Bin(t, "vmalert", VictoriaMetricsVersion), "http://"+v.AlertAddr+"/health", args...)
	}
	return v
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// startWaiting starts a process, stopped when the test ends, and waits
// until u answers 200.
func startWaiting(t testing.TB, name, bin, u string, args ...string) *process {
	t.Helper()
	p, err := start(name, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	if err := p.waitHTTP(u); err != nil {
		t.Fatal(err)
	}
	return p
}

// OTLPEndpoint is vmagent's OTLP/HTTP metrics URL (protobuf only: there is
// no OTLP/gRPC receiver).
func (v *VictoriaMetrics) OTLPEndpoint() string {
	return "http://" + v.AgentAddr + "/opentelemetry/v1/metrics"
}

// Log is the output of vmagent, vmauth and vmalert so far.
func (v *VictoriaMetrics) Log() string {
	var b strings.Builder
	for _, p := range []*process{v.agent, v.auth, v.alert} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, p.out.String())
		}
	}
	for i, n := range v.Nodes {
		if n.proc != nil {
			fmt.Fprintf(&b, "--- storage node %d:\n%s\n", i, n.proc.out.String())
		}
	}
	return b.String()
}

// Start (re)starts the storage node on its address and data directory.
func (n *VMNode) Start() error {
	proc, err := start("victoria-metrics", n.bin,
		"-httpListenAddr="+n.Addr,
		"-storageDataPath="+n.dataDir,
		"-retentionPeriod=100y",
		// Queries see samples as soon as they are stored (by default the
		// last 30s are left out, for samples still on their way); no
		// response cache, which could hide a replica's late samples.
		"-search.latencyOffset=0s",
		"-search.disableCache",
		"-loggerLevel=WARN",
	)
	if err != nil {
		return err
	}
	n.proc = proc
	return proc.waitHTTP("http://" + n.Addr + "/health")
}

// Stop stops the storage node cleanly (SIGTERM: it flushes what it holds).
func (n *VMNode) Stop() { n.proc.stop() }

// Kill kills the storage node (SIGKILL), as a node lost to a crash or a
// hardware failure: what it had not flushed is lost on that node.
func (n *VMNode) Kill() {
	if n.proc == nil {
		return
	}
	_ = n.proc.cmd.Process.Kill()
	<-n.proc.done
}

// Alert is one alert vmalert holds.
type Alert struct {
	Name   string            `json:"name"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
}

// Alerts returns vmalert's alerts (pending and firing).
func (v *VictoriaMetrics) Alerts(ctx context.Context) ([]Alert, error) {
	if v.AlertAddr == "" {
		return nil, fmt.Errorf("vmalert not started: no rules")
	}
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := getJSON(ctx, "http://"+v.AlertAddr+"/api/v1/alerts", &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("vmalert alerts: status %q", body.Status)
	}
	return body.Data.Alerts, nil
}
