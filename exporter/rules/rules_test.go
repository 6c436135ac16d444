package rules

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
)

const rulesFile = "../../charts/bpfleet/files/bpfleet.rules.yaml"

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(backends.Bin(t, "promtool", backends.PrometheusVersion), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", "--lint=all", "--lint-fatal", rulesFile)
}

func TestRulesUnit(t *testing.T) {
	promtool(t, "test", "rules", "bpfleet.rules_test.yaml")
}

// TestRulesThousandNodes runs the rules over a generated fleet of 1,000
// nodes (two CPU models, every node with a workload-level program series
// and agent series): one node's calibrated overhead regresses, one node's
// program misses, one node is drained (its agent stops cleanly), one
// node's kernel is upgraded and one node's hash map fills (every node has
// one, half full). Exactly those alerts fire, and the join on
// target_info holds for every node.
func TestRulesThousandNodes(t *testing.T) {
	const nodes = 1000
	dir := t.TempDir()
	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files:\n  - %s\nevaluation_interval: 1m\ntests:\n  - name: 1000 nodes\n    interval: 1m\n    input_series:\n", abs)
	series := func(s, values string) { fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", s, values) }
	node := func(i int) string { return fmt.Sprintf("node-%04d", i) }
	const regressed, missing, drained, upgraded, full = 7, 500, 998, 321, 654
	for i := range nodes {
		n := node(i)
		cpu := "AMD EPYC"
		if i%2 == 1 {
			cpu = "Intel Xeon"
		}
		ti := fmt.Sprintf(`target_info{job="bpfleet-agent",instance="%s",os_version="%%s",host_cpu_model_name="%s"}`, n, cpu)
		scans, shutdown, life := "0+6x40", "0x40", "x40"
		if i == drained {
			scans, shutdown, life = "0+6x10 _x30", "0x9 1 _x30", "x10 _x30"
		}
		if i == upgraded {
			series(fmt.Sprintf(ti, "6.18.0"), "1x10 _x30")
			series(fmt.Sprintf(ti, "6.19.0"), "_x10 1x30")
		} else {
			series(fmt.Sprintf(ti, "6.18.0"), "1"+life)
		}
		series(fmt.Sprintf(`bpf_agent_scans_total{job="bpfleet-agent",instance="%s"}`, n), scans)
		series(fmt.Sprintf(`bpf_agent_shutdown{job="bpfleet-agent",instance="%s"}`, n), shutdown)
		// 10 ns, within 1 ns of jitter, except the regressed node's 30 ns.
		overhead := fmt.Sprintf("0.%09d", 10+i%2)
		if i == regressed {
			overhead = "0.000000030"
		}
		series(fmt.Sprintf(`bpf_attach_type_overhead_seconds{job="bpfleet-agent",instance="%s",bpf_attach_type="raw_tp"}`, n), overhead+life)
		misses := "0" + life
		if i == missing {
			misses = "0x20 0+10x20"
		}
		series(fmt.Sprintf(`bpf_program_recursion_misses_total{job="bpfleet-agent",instance="%s",bpf_program_name="probe",bpf_miss_kind="recursion",bpf_attach_type="tp_btf",k8s_namespace_name="obs",k8s_workload_kind="DaemonSet",k8s_workload_name="tracer",process_executable_name="tracer"}`, n), misses)
		fullness := "0.5" + life
		if i == full {
			fullness = "0.5x5 0.97x35"
		}
		series(fmt.Sprintf(`bpf_map_fullness_ratio{job="bpfleet-agent",instance="%s",bpf_map_name="flows",bpf_map_type="hash",k8s_namespace_name="obs",k8s_workload_kind="DaemonSet",k8s_workload_name="tracer",process_executable_name="tracer"}`, n), fullness)
	}
	fmt.Fprintf(&b, `    alert_rule_test:
      - eval_time: 35m
        alertname: BPFAttachTypeOverheadRegressed
        exp_alerts:
          - exp_labels: {severity: warning, job: bpfleet-agent, instance: %[1]s, bpf_attach_type: raw_tp, os_version: "6.18.0", host_cpu_model_name: Intel Xeon}
            exp_annotations:
              summary: "raw_tp overhead on %[1]s is over 1.5x the median of nodes with kernel 6.18.0 on Intel Xeon"
      - eval_time: 25m
        alertname: BPFProgramRecursionMisses
        exp_alerts:
          - exp_labels: {severity: warning, job: bpfleet-agent, instance: %[2]s, bpf_program_name: probe, bpf_miss_kind: recursion, bpf_attach_type: tp_btf, k8s_namespace_name: obs, k8s_workload_kind: DaemonSet, k8s_workload_name: tracer, process_executable_name: tracer}
            exp_annotations:
              summary: "BPF program probe on %[2]s is skipping runs (recursion misses growing)"
              description: "The kernel skipped runs of this tp_btf program because its recursion guard was held: the tool that owns it (tracer, DaemonSet obs/tracer) is blind to those events."
      - eval_time: 25m
        alertname: BPFMapNearlyFull
        exp_alerts:
          - exp_labels: {severity: warning, job: bpfleet-agent, instance: %[4]s, bpf_map_name: flows, bpf_map_type: hash, k8s_namespace_name: obs, k8s_workload_kind: DaemonSet, k8s_workload_name: tracer, process_executable_name: tracer}
            exp_annotations:
              summary: "BPF map flows on %[4]s is 97%% full"
              description: "A hash map refuses new keys at max_entries: the programs that use it (tracer, DaemonSet obs/tracer) silently drop what they meant to record. Raise max_entries, or find what fills it (bpfleet maps)."
      - eval_time: 25m
        alertname: BPFleetAgentDown
        exp_alerts: []
      - eval_time: 25m
        alertname: BPFleetAgentStalled
        exp_alerts: []
    promql_expr_test:
      - expr: count(bpfleet:attach_type_overhead_seconds:node)
        eval_time: 12m
        exp_samples:
          - labels: '{}'
            value: %[3]d
      - expr: count(bpfleet:attach_type_overhead_seconds:node{os_version="6.19.0"})
        eval_time: 12m
        exp_samples:
          - labels: '{}'
            value: 1
`, node(regressed), node(missing), nodes, node(full))
	f := filepath.Join(dir, "fleet_test.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	promtool(t, "test", "rules", f)
	t.Logf("promtool over %d nodes: %v", nodes, time.Since(start).Round(time.Millisecond))
	vmalertTool(t, f)
}

// vmalertTool runs vmalert-tool unittest on a promtool test file, as
// written: only its rule_files made absolute (vmalert-tool reads them
// relative to the file, which is copied) and promql_expr_test read as
// metricsql_expr_test, vmalert-tool's name for the same thing (its YAML
// is strict). Groups get no alertgroup label, as in promtool.
func vmalertTool(t *testing.T, testFile string) {
	t.Helper()
	b, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "promql_expr_test:", "metricsql_expr_test:")
	s = strings.ReplaceAll(s, "- "+rulesFile+"\n", "- "+abs+"\n")
	f := filepath.Join(t.TempDir(), filepath.Base(testFile))
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(backends.Bin(t, "vmalert-tool", backends.VictoriaMetricsVersion), "unittest", "--files", f, "--disableAlertgroupLabel")
	// Its storage goes to a fresh directory under TMPDIR: the test's own.
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("vmalert-tool unittest %s: %v\n%s", testFile, err, out)
	}
	t.Logf("vmalert-tool unittest %s: %v", testFile, time.Since(start).Round(time.Millisecond))
}

// TestRulesUnitVMAlertTool runs the rules' unit tests in vmalert-tool,
// which evaluates them as VictoriaMetrics' vmalert does (MetricsQL): the
// shipped rules hold on both stores.
func TestRulesUnitVMAlertTool(t *testing.T) {
	vmalertTool(t, "bpfleet.rules_test.yaml")
}
