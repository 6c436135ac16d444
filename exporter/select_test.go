package exporter

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/internal/config"
)

// promOTel resolves the settings of the Prometheus tests as the agent
// does (the kinds themselves: internal/config's TestExporterKinds).
func promOTel(t *testing.T, env map[string]string) config.OTel {
	t.Helper()
	o, err := config.ResolveOTel(config.MapEnv(env), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// OTEL_METRICS_EXPORTER=prometheus serves the metrics for scraping, under
// the names METRICS.md gives (the ones Prometheus' OTLP receiver makes), and
// no OTLP exporter is set up even with an endpoint in the environment.
func TestPrometheusExporterServes(t *testing.T) {
	o := promOTel(t, map[string]string{
		"OTEL_METRICS_EXPORTER":         "prometheus",
		"OTEL_TRACES_EXPORTER":          "none",
		"OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
		"OTEL_EXPORTER_PROMETHEUS_PORT": "0",
		"OTEL_EXPORTER_OTLP_ENDPOINT":   "http://127.0.0.1:1",
	})
	e, err := New(context.Background(), Config{Level: LevelProgram, NodeName: "node-a", OTel: o})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	if !strings.HasPrefix(e.MetricsTarget, "prometheus http://127.0.0.1:") || e.TracesTarget != "" {
		t.Errorf("targets: metrics %q, traces %q", e.MetricsTarget, e.TracesTarget)
	}
	p := prog(42, 2_500_000_000, u64(17))
	e.Update(context.Background(), snapshot(1, p))

	resp, err := http.Get("http://" + e.PrometheusAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	scraped := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(string(body), -1) {
		scraped[m[1]] = true
	}
	documented := PrometheusNames(LevelProgram)
	for n := range scraped {
		if !strings.HasPrefix(n, "bpf_") {
			continue
		}
		base := n
		if slices.Contains(documented, n+"_count") { // histograms: the family, not _count
			base = n + "_count"
		}
		if !slices.Contains(documented, base) {
			t.Errorf("scrape has %s, which METRICS.md does not name", n)
		}
	}
	for _, n := range []string{"bpf_program_recursion_misses_total", "bpf_program_run_time_seconds_total", "bpf_agent_scans_total", "bpf_agent_stats_enabled", "target_info"} {
		if !scraped[n] {
			t.Errorf("scrape lacks %s", n)
		}
	}
	if !regexp.MustCompile(`(?m)^bpf_program_recursion_misses_total\{[^}]*bpf_program_id="42"[^}]*\} 17$`).Match(body) {
		t.Errorf("scrape lacks the program's 17 misses:\n%s", grep(string(body), "recursion_misses"))
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + e.PrometheusAddr + "/metrics"); err == nil {
		t.Error("still serving after Shutdown")
	}
}

// A taken port stops the exporter at start, naming the variables (a port
// that is not a number is refused before: internal/config's
// TestPrometheusAddr).
func TestPrometheusPortTaken(t *testing.T) {
	env := map[string]string{"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT": "0"}
	first, err := New(context.Background(), Config{OTel: promOTel(t, env)})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown(context.Background())
	_, env["OTEL_EXPORTER_PROMETHEUS_PORT"], _ = strings.Cut(first.PrometheusAddr, ":")
	if _, err := New(context.Background(), Config{OTel: promOTel(t, env)}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_PROMETHEUS") {
		t.Errorf("second exporter on a taken port: %v", err)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
