package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/exporter/dashboards"
	"github.com/bpfleet/bpfleet/probes/mappressure"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// The way fleets push: agent → OpenTelemetry Collector (otlp receiver,
// batch) → Prometheus' OTLP receiver and Jaeger. The canary's misses reach
// Prometheus as the kernel's count and its episode reaches Jaeger as a
// span, both through the real Collector; the dashboards' panels all return
// data from that Prometheus.
func TestAgentThroughCollector(t *testing.T) {
	c, id := canarytest.Load(t)
	holdHashMap(t)
	prom := backends.StartPrometheus(t)
	jg := backends.StartJaeger(t)
	start := time.Now()
	col := backends.StartCollector(t, prom, jg)
	t.Logf("Collector ready in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("collector output:\n%s", col.Log())
		}
	})
	start = time.Now()
	// Both protocols the chart offers, one per signal: metrics over
	// OTLP/HTTP to the Collector's 4318, spans over gRPC to its 4317.
	agent := startAgent(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + col.OTLPHTTP + "/v1/metrics",
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://" + col.OTLPGRPC,
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc",
		"K8S_NODE_NAME=e2e-node",
	}, "--quiet-intervals", "4", "--metrics-level", "program")

	before := kernelMisses(t, c)
	waitMisses(t, prom, id, before)
	trigger(t, c, 40)
	want := kernelMisses(t, c)
	if want-before != 40 {
		t.Fatalf("kernel counted %d misses for 40 triggers", want-before)
	}
	waitMisses(t, prom, id, want)
	t.Logf("through the Collector, Prometheus has %d misses for program %d, as the kernel, %v after the agent started", want, id, time.Since(start).Round(time.Millisecond))

	sp := episodeSpan(t, jg, id, "quiet")
	if got := num(sp.Tags["bpf.episode.misses"]); got != float64(want-before) {
		t.Errorf("episode span through the Collector has %v misses, want %d", got, want-before)
	}
	if got := sp.Process["k8s.node.name"]; got != "e2e-node" {
		t.Errorf("span resource k8s.node.name = %v", got)
	}
	checkNames(t, prom)
	checkDashboards(t, prom, "e2e-node", nil)
	agent.stop(t)
}

// The way kube-prometheus-stack users collect: the agent serves its
// metrics (OTEL_METRICS_EXPORTER=prometheus) and Prometheus scrapes them,
// with the instance label set to the node's name as the chart's
// ServiceMonitor does. Same names, same values as over OTLP. A second
// agent at the default metrics level (workload) is scraped beside it, so
// the dashboards are checked at both levels.
func TestPrometheusScrape(t *testing.T) {
	c, id := canarytest.Load(t)
	holdHashMap(t)
	scraped := func(node string, args ...string) (*agentProc, backends.ScrapeTarget) {
		port := strconv.Itoa(backends.FreePort(t))
		a := startAgent(t, []string{
			"OTEL_METRICS_EXPORTER=prometheus",
			"OTEL_TRACES_EXPORTER=none",
			"OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1",
			"OTEL_EXPORTER_PROMETHEUS_PORT=" + port,
			"K8S_NODE_NAME=" + node,
		}, args...)
		return a, backends.ScrapeTarget{Addr: "127.0.0.1:" + port, Instance: node}
	}
	agent, target := scraped("e2e-node", "--metrics-level", "program")
	workloadAgent, workloadTarget := scraped("e2e-workload")
	start := time.Now()
	prom := backends.StartPrometheus(t, target, workloadTarget)

	// Both scraped before the misses, so the panels see them grow.
	waitMisses(t, prom, id, kernelMisses(t, c))
	err := backends.Eventually(30*time.Second, func() error {
		q := `sum without (bpf_miss_cause) (bpf_program_recursion_misses_total{instance="e2e-workload", bpf_program_name="canary"})`
		if ss, err := prom.Query(context.Background(), q); err != nil || len(ss) == 0 {
			return fmt.Errorf("%s: %v, %v", q, ss, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	trigger(t, c, 25)
	want := kernelMisses(t, c)
	waitMisses(t, prom, id, want)
	t.Logf("scraped: Prometheus has %d misses for program %d, as the kernel, %v after it started", want, id, time.Since(start).Round(time.Millisecond))
	checkNames(t, prom)
	// Two agents on one kernel: each finds the stats held by the other, and
	// then the stats tax is not measurable and absent by design (METRICS.md).
	// TestAgentThroughCollector, with one agent, queries those panels too.
	absent := map[string]string{}
	for _, m := range []string{"bpf.agent.stats.tax", "bpf.agent.stats.tax.always", "bpf.program_type.stats.tax"} {
		n, err := exporter.PrometheusName(m)
		if err != nil {
			t.Fatal(err)
		}
		absent[n] = "stats held by the other agent on this kernel"
	}
	checkDashboards(t, prom, "e2e-node", absent)
	checkDashboards(t, prom, "e2e-workload", absent)
	agent.stop(t)
	workloadAgent.stop(t)
}

// checkDashboards runs every panel query of the dashboards the chart ships
// (charts/bpfleet/dashboards, as committed) against prom (Prometheus or
// VictoriaMetrics), with the template variables set as Grafana would for
// the node, and wants data from each, except queries of the metrics in
// absent (name → why this run has none).
func checkDashboards(t *testing.T, prom querier, node string, absent map[string]string) {
	t.Helper()
	files, err := filepath.Glob("../../charts/bpfleet/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in charts/bpfleet/dashboards: %v", err)
	}
	vars := dashboardVars(node)
	absent = withEvictionsAbsent(t, absent)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashboards.Queries(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, panel := range slices.Sorted(maps.Keys(qs)) {
			q := vars.Replace(qs[panel])
			if strings.Contains(q, "$") {
				t.Errorf("%s %q: a variable left unset: %s", filepath.Base(f), panel, q)
				continue
			}
			if m := absentMetric(q, absent); m != "" {
				t.Logf("%s panel %q not queried on %s: %s has no data here (%s)", filepath.Base(f), panel, node, m, absent[m])
				continue
			}
			// rate() wants two samples inside the window: poll briefly.
			err := backends.Eventually(15*time.Second, func() error {
				ss, err := prom.Query(context.Background(), q)
				if err != nil {
					return err
				}
				if len(ss) == 0 {
					return fmt.Errorf("no data")
				}
				return nil
			})
			if err != nil {
				t.Errorf("%s panel %q returns no data: %v\n%s", filepath.Base(f), panel, err, q)
				continue
			}
			n++
		}
	}
	t.Logf("%s: %d dashboard queries of %d dashboards returned data", node, n, len(files))
}

// dashboardVars sets the dashboards' variables as Grafana would for one
// node of the agents' job.
func dashboardVars(node string) *strings.Replacer {
	return strings.NewReplacer(
		"$"+dashboards.VarJob, "bpfleet-agent",
		"$"+dashboards.VarNode, node,
		"$__rate_interval", "1m",
		"$__range_s", "300", // before $__range, which it starts with
		"$__range", "5m",
	)
}

// withEvictionsAbsent is absent plus bpf.map.evictions where this kernel
// refuses the agent's eviction counter (the CI kernel refuses every
// trampoline program), with the kernel's reason.
func withEvictionsAbsent(t *testing.T, absent map[string]string) map[string]string {
	t.Helper()
	why := evictionsRefused(t)
	if why == "" {
		return absent
	}
	out := map[string]string{evictionsName: why}
	maps.Copy(out, absent)
	return out
}

// evictionsName is bpf.map.evictions in Prometheus.
const evictionsName = "bpf_map_evictions_total"

// evictionsRefused is why this kernel refuses the agent's eviction counter
// (the kernel's words), "" where it loads.
func evictionsRefused(t *testing.T) string {
	t.Helper()
	p, err := mappressure.Load()
	if err == nil {
		p.Close()
		return ""
	}
	var r *mappressure.Refused
	if !errors.As(err, &r) {
		t.Fatalf("loading the eviction counter: %v", err)
	}
	return "the kernel refused the eviction counter: " + r.Reason()
}

// absentMetric returns the metric of absent that q uses, else "".
func absentMetric(q string, absent map[string]string) string {
	for _, name := range regexp.MustCompile(`[a-z_]+`).FindAllString(q, -1) {
		if _, ok := absent[name]; ok {
			return name
		}
	}
	return ""
}
