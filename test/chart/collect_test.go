package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
)

// schemaEnum reads the allowed values of otel.<key> from values.schema.json,
// so a value added there is tested here without editing the test.
func schemaEnum(t *testing.T, key string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Otel struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"otel"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	e := s.Properties.Otel.Properties[key].Enum
	if len(e) == 0 {
		t.Fatalf("values.schema.json has no enum for otel.%s", key)
	}
	return e
}

// podEnv sets the agent container's environment as the kubelet would:
// fieldRefs get stand-in values, $(VAR) references are expanded.
func podEnv(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			out[e.Name] = "from-" + strings.ReplaceAll(e.ValueFrom.FieldRef.FieldPath, ".", "-")
		case e.ValueFrom != nil:
			continue // Secrets: not in this test
		default:
			out[e.Name] = ref.ReplaceAllStringFunc(e.Value, func(m string) string { return out[ref.FindStringSubmatch(m)[1]] })
		}
	}
	return out
}

// TestExporterValuesWork: every exporter and protocol value the schema
// allows, rendered into the DaemonSet's environment, is accepted by the
// agent's real exporter setup and exports where it says; the schema
// refuses the rest (TestInvalidValuesRejected). Before, metricsExporter:
// prometheus exported nothing and protocol: http/json made the agent exit.
func TestExporterValuesWork(t *testing.T) {
	for _, m := range schemaEnum(t, "metricsExporter") {
		for _, tr := range schemaEnum(t, "tracesExporter") {
			for _, p := range schemaEnum(t, "protocol") {
				for _, endpoint := range []string{"", "http://collector.example:4318"} {
					name := fmt.Sprintf("metrics=%s,traces=%s,protocol=%s,endpoint=%q", m, tr, p, endpoint)
					t.Run(name, func(t *testing.T) {
						checkExporterValues(t, m, tr, p, endpoint)
					})
				}
			}
		}
	}
}

func checkExporterValues(t *testing.T, metrics, traces, protocol, endpoint string) {
	r := mustRender(t, fmt.Sprintf(`otel: {metricsExporter: %s, tracesExporter: %s, protocol: %s, endpoint: %q}`, metrics, traces, protocol, endpoint))
	env := podEnv(t, agentContainer(t, r))
	// As the agent does: internal/config resolves and checks the pod's
	// environment, then the exporter is built from what it resolved (it
	// reads no environment itself).
	c := config.DefaultAgent()
	if err := c.Resolve(config.MapEnv(env)); err != nil {
		t.Fatalf("internal/config refuses the chart's environment: %v", err)
	}
	if metrics == "prometheus" {
		if env["OTEL_EXPORTER_PROMETHEUS_HOST"] != "0.0.0.0" || env["OTEL_EXPORTER_PROMETHEUS_PORT"] != "9464" {
			t.Errorf("prometheus exporter on %s:%s, want 0.0.0.0:9464", env["OTEL_EXPORTER_PROMETHEUS_HOST"], env["OTEL_EXPORTER_PROMETHEUS_PORT"])
		}
		if c.OTel.PrometheusHost != "0.0.0.0" || c.OTel.PrometheusPort != 9464 {
			t.Errorf("resolved prometheus exporter on %s:%d, want 0.0.0.0:9464", c.OTel.PrometheusHost, c.OTel.PrometheusPort)
		}
		// The test listens on a free loopback port, not the pod's 0.0.0.0:9464.
		c.OTel.PrometheusHost, c.OTel.PrometheusPort = "127.0.0.1", 0
	}
	e, err := exporter.New(context.Background(), exporter.Config{
		ConsoleOut: io.Discard,
		OTel:       c.OTel,
	})
	if err != nil {
		t.Fatalf("the agent refuses the chart's environment: %v", err)
	}
	defer func() {
		// Nothing listens at collector.example: do not wait out the final export.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = e.Shutdown(ctx)
	}()
	wantMetrics := map[string]string{"otlp": "otlp " + protocol + " " + endpoint, "prometheus": "prometheus http://127.0.0.1:", "console": "console", "none": ""}[metrics]
	wantTraces := map[string]string{"otlp": "otlp " + protocol + " " + endpoint, "console": "console", "none": ""}[traces]
	if endpoint == "" {
		// No endpoint: nothing goes over OTLP, as NOTES.txt says.
		if metrics == "otlp" {
			wantMetrics = ""
		}
		if traces == "otlp" {
			wantTraces = ""
		}
	}
	if !strings.HasPrefix(e.MetricsTarget, wantMetrics) || (wantMetrics == "") != (e.MetricsTarget == "") {
		t.Errorf("metrics go to %q, want %q", e.MetricsTarget, wantMetrics)
	}
	if e.TracesTarget != wantTraces {
		t.Errorf("traces go to %q, want %q", e.TracesTarget, wantTraces)
	}
	otlp := (metrics == "otlp" || traces == "otlp")
	if warned := strings.Contains(r.Notes, "send nothing over OTLP"); warned != (otlp && endpoint == "") {
		t.Errorf("NOTES warn about no endpoint: %v, want %v:\n%s", warned, otlp && endpoint == "", r.Notes)
	}
	if metrics == "prometheus" && !strings.Contains(r.Notes, "served for scraping on port 9464") {
		t.Errorf("NOTES do not say where metrics are scraped:\n%s", r.Notes)
	}
}

// The resource names the node, never the agent's pod (its name changes at
// every rollout); its namespace goes under bpfleet.agent.*, never the
// k8s.namespace.name the owners' data points carry.
func TestAgentPodIdentity(t *testing.T) {
	env := podEnv(t, agentContainer(t, mustRender(t, `agent: {clusterName: prod}`)))
	attrs := map[string]string{}
	for _, kv := range strings.Split(env["OTEL_RESOURCE_ATTRIBUTES"], ",") {
		k, v, _ := strings.Cut(kv, "=")
		attrs[k] = v
	}
	for _, owner := range []string{"k8s.pod.name", "k8s.namespace.name", "k8s.container.name", "container.id", "process.pid", "bpfleet.agent.pod.name", "k8s.pod.uid"} {
		if _, ok := attrs[owner]; ok {
			t.Errorf("OTEL_RESOURCE_ATTRIBUTES sets %s, an owner attribute of the data points: %s", owner, env["OTEL_RESOURCE_ATTRIBUTES"])
		}
	}
	for k, want := range map[string]string{
		"k8s.node.name":               "from-spec-nodeName",
		"bpfleet.agent.pod.namespace": "from-metadata-namespace",
		"k8s.cluster.name":            "prod",
	} {
		if attrs[k] != want {
			t.Errorf("resource %s = %q, want %q (%s)", k, attrs[k], want, env["OTEL_RESOURCE_ATTRIBUTES"])
		}
	}
}

// The ServiceMonitor gives scraped series the job and instance the OTLP
// path gives them, which the alerts and dashboards key on.
func TestServiceMonitorLabels(t *testing.T) {
	r := mustRender(t, `{otel: {metricsExporter: prometheus}, serviceMonitor: {enabled: true}}`)
	got := map[string]string{}
	for _, rl := range r.ServiceMonitor.Spec.Endpoints[0].Relabelings {
		got[rl.TargetLabel] = strings.Join(rl.SourceLabels, ",") + "|" + rl.Replacement
	}
	for label, want := range map[string]string{
		"job":           "|bpfleet-agent",
		"instance":      "__meta_kubernetes_pod_node_name|",
		"k8s_node_name": "__meta_kubernetes_pod_node_name|",
	} {
		if got[label] != want {
			t.Errorf("relabeling to %s = %q, want %q", label, got[label], want)
		}
	}
}

// dashboards.enabled ships every committed dashboard, byte for byte, in
// one ConfigMap Grafana's sidecar picks up by label.
func TestDashboardsConfigMap(t *testing.T) {
	r := mustRender(t, `dashboards: {enabled: true, namespace: monitoring, annotations: {grafana_folder: BPF}}`)
	cm := r.ConfigMap
	if cm == nil {
		t.Fatalf("no ConfigMap: %v", r.kinds)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "BPF" {
		t.Errorf("ConfigMap labels %v, namespace %q, annotations %v", cm.Labels, cm.Namespace, cm.Annotations)
	}
	files, err := filepath.Glob(filepath.Join(chartDir(t), "dashboards", "*.json"))
	if err != nil || len(files) < 2 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	if len(cm.Data) != len(files) {
		t.Errorf("ConfigMap has %d dashboards, the chart %d", len(cm.Data), len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := cm.Data[filepath.Base(f)]
		if strings.TrimSpace(got) != strings.TrimSpace(string(b)) {
			t.Errorf("%s differs in the ConfigMap", filepath.Base(f))
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s in the ConfigMap is not JSON", filepath.Base(f))
		}
	}
	if r.Notes == "" || !strings.Contains(r.Notes, "monitoring/bpfleet-dashboards") {
		t.Errorf("NOTES do not name the dashboards ConfigMap:\n%s", r.Notes)
	}
}
