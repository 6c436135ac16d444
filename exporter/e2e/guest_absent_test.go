package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/kernels/exportabsent"
)

// oldestEntry is the matrix's oldest kernel: 5.10, no recursion_misses,
// no perf_event links, no link missed.
const oldestEntry = "bullseye-amd64"

// TestGuestAbsentFigures: what the kernel lacks stays absent all the way
// to the backend, and the shipped alert rules stay silent on such a node.
// The real bpfleet agent runs in the 5.10 guest with a tracepoint and a
// kprobe program, exporting over OTLP/HTTP to this Prometheus, which
// evaluates charts/bpfleet/files/bpfleet.rules.yaml every second. The
// node's series must hold its programs and runs and no recursion-miss or
// link-missed series at all (a 0 would be a figure the kernel never gave),
// and no alert may fire or be pending for the node.
func TestGuestAbsentFigures(t *testing.T) {
	prom := backends.StartPrometheusWithRules(t, []string{filepath.Join("..", "..", "charts", "bpfleet", "files", "bpfleet.rules.yaml")})
	metricsURL := guestURL(prom.Addr, strings.TrimPrefix(prom.OTLPEndpoint(), "http://"+prom.Addr))
	got := runGuest(t, oldestEntry, "./test/kernels/exportabsent", "TestExportAbsent", exportabsent.MetricPrefix,
		exportabsent.MetricsEnv+"="+metricsURL)
	for _, k := range []string{"instance", "tracepoint_id", "kprobe_id", "os_version", "scans"} {
		if got[k] == "" {
			t.Fatalf("the guest reported no %s (its output above)", k)
		}
	}
	node := fmt.Sprintf("instance=%q", got["instance"])
	count := func(expr string) (int, error) {
		ss, err := prom.Query(context.Background(), expr)
		return len(ss), err
	}

	// The node's series arrived: its scans and its programs' runs.
	err := backends.Eventually(30*time.Second, func() error {
		for _, expr := range []string{
			fmt.Sprintf(`bpf_agent_scans_total{%s}`, node),
			fmt.Sprintf(`bpf_program_run_count_total{%s} > 0`, node),
		} {
			if n, err := count(expr); err != nil || n == 0 {
				return fmt.Errorf("%s: %d series (%v)", expr, n, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Absent, not zero.
	for _, m := range []string{"bpf_program_recursion_misses_total", "bpf_attach_type_recursion_misses_total", "bpf_link_missed_total"} {
		expr := fmt.Sprintf(`%s{%s}`, m, node)
		if n, err := count(expr); err != nil || n != 0 {
			t.Errorf("%s: %d series (%v); want none, the kernel (%s) has no such figure", expr, n, err, got["os_version"])
		}
	}
	// Every rule evaluated over the node's data (the rules run every
	// second; 5 s is five evaluations after the last export), none
	// firing or pending for it.
	time.Sleep(5 * time.Second)
	ss, err := prom.Query(context.Background(), fmt.Sprintf(`ALERTS{%s}`, node))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		t.Errorf("alert %s %s on the %s node: %v", s.Labels["alertname"], s.Labels["alertstate"], got["os_version"], s.Labels)
	}
	t.Logf("%s node %s: %s scans exported, no miss series, %d alerts", got["os_version"], got["instance"], got["scans"], len(ss))
}
