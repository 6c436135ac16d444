package exporter

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestExporterKinds(t *testing.T) {
	all := []string{KindOTLP, KindPrometheus, KindConsole, KindNone}
	for _, tc := range []struct {
		value string
		want  []string // nil: refused
	}{
		{"", []string{KindOTLP}},
		{"otlp", []string{KindOTLP}},
		{"prometheus", []string{KindPrometheus}},
		{"otlp, console", []string{KindOTLP, KindConsole}},
		{"none", []string{KindNone}},
		{"none,otlp", nil},
		{"jaeger", nil},
		{"zipkin", nil},
	} {
		t.Setenv("OTEL_METRICS_EXPORTER", tc.value)
		got, err := exporterKinds("OTEL_METRICS_EXPORTER", "", all...)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q accepted: %v", tc.value, got)
			} else if !strings.Contains(err.Error(), "OTEL_METRICS_EXPORTER") {
				t.Errorf("%q: error %q does not name the variable", tc.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		var kinds []string
		for k := range got {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(kinds, want) {
			t.Errorf("%q: kinds %v, want %v", tc.value, kinds, want)
		}
	}
	// Traces have no Prometheus exporter.
	t.Setenv("OTEL_TRACES_EXPORTER", "prometheus")
	if _, err := exporterKinds("OTEL_TRACES_EXPORTER", "", KindOTLP, KindConsole, KindNone); err == nil {
		t.Error("OTEL_TRACES_EXPORTER=prometheus accepted")
	}
}

// OTEL_METRICS_EXPORTER=prometheus serves the metrics for scraping, under
// the names METRICS.md gives (the ones Prometheus' OTLP receiver makes), and
// no OTLP exporter is set up even with an endpoint in the environment.
func TestPrometheusExporterServes(t *testing.T) {
	t.Setenv("OTEL_METRICS_EXPORTER", "prometheus")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	e, err := New(context.Background(), Config{Level: LevelProgram, NodeName: "node-a"})
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

func TestPrometheusPortTaken(t *testing.T) {
	t.Setenv("OTEL_METRICS_EXPORTER", "prometheus")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")
	first, err := New(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown(context.Background())
	_, port, _ := strings.Cut(first.PrometheusAddr, ":")
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_PORT", port)
	if _, err := New(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_PROMETHEUS") {
		t.Errorf("second exporter on a taken port: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "metrics")
	if _, err := New(context.Background(), Config{}); err == nil {
		t.Error("port \"metrics\" accepted")
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
