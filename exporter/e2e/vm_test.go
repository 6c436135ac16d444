package e2e

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// store is one of the two stores a fleet's gateway writes to, by name.
type store struct {
	name string
	q    interface {
		Query(context.Context, string) ([]backends.Sample, error)
	}
}

// The fleet's shape at scale (metrics only: Jaeger's spans are
// TestAgentThroughCollector's): agent → gateway Collector → Prometheus and,
// beside it, a replicated two-node VictoriaMetrics (vmagent, vmauth,
// vmalert), both evaluating the shipped rules. The same queries return
// the same figures from both (VictoriaMetrics read through vmauth and
// from each storage node), the kernel's miss count among them, the
// calibration recording rule (a target_info join on Prometheus, resource
// labels on VictoriaMetrics) holds on both, and both fire the same
// recursion-miss alert on the canary's genuine misses.
func TestAgentIntoBothStores(t *testing.T) {
	c, id := canarytest.Load(t)
	rules := []string{filepath.Join("..", "..", "charts", "bpfleet", "files", "bpfleet.rules.yaml")}
	start := time.Now()
	prom := backends.StartPrometheusWithRules(t, rules)
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2, Rules: rules})
	col := backends.StartGateway(t, nil, prom.OTLPEndpoint(), vm.OTLPEndpoint())
	t.Logf("backends ready in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("collector output:\n%s\nVictoriaMetrics output:\n%s", col.Log(), vm.Log())
		}
	})
	const node = "e2e-both"
	agent := startAgent(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + col.OTLPHTTP + "/v1/metrics",
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=none",
		"K8S_NODE_NAME=" + node,
	}, "--metrics-level", "program")

	stores := []store{{"Prometheus", prom}, {"VictoriaMetrics via vmauth", vm}}
	for i, n := range vm.Nodes {
		stores = append(stores, store{fmt.Sprintf("VictoriaMetrics node %d", i), n})
	}
	ctx := context.Background()
	misses := fmt.Sprintf(`sum without (bpf_miss_cause) (bpf_program_recursion_misses_total{instance=%q, bpf_program_id="%d"})`, node, id)
	waitAll := func(q string, want float64) {
		t.Helper()
		for _, s := range stores {
			err := backends.Eventually(60*time.Second, func() error {
				ss, err := s.q.Query(ctx, q)
				if err != nil {
					return err
				}
				if len(ss) != 1 || ss[0].Value != want {
					return fmt.Errorf("%s: %s = %v, want one series at %v", s.name, q, ss, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	waitAll(misses, float64(kernelMisses(t, c)))
	trigger(t, c, 40)
	want := kernelMisses(t, c)
	waitAll(misses, float64(want))
	t.Logf("every store has the kernel's %d misses of program %d, %v after the backends were up", want, id, time.Since(start).Round(time.Millisecond))

	// Figures that stand still once the agent runs: the same series (label
	// sets) with the same values in every store.
	for _, q := range []string{
		fmt.Sprintf(`bpf_program_recursion_misses_total{instance=%q, bpf_program_id="%d"}`, node, id),
		fmt.Sprintf(`bpf_attach_type_overhead_seconds{instance=%q}`, node),
		fmt.Sprintf(`bpfleet:attach_type_overhead_seconds:node{instance=%q}`, node),
		fmt.Sprintf(`bpf_agent_stats_mode{instance=%q}`, node),
	} {
		err := backends.Eventually(30*time.Second, func() error { return sameEverywhere(ctx, stores, q) })
		if err != nil {
			t.Error(err)
		}
	}

	// The alert, by its labels, firing in both: Prometheus' ALERTS and
	// vmalert's (its ALERTS series, written back through vmagent). Ours:
	// other tests on this host may load a canary too.
	exe := filepath.Base(os.Args[0])
	alert := fmt.Sprintf(`ALERTS{alertname="BPFProgramRecursionMisses", alertstate="firing", instance=%q, bpf_program_name="canary", process_executable_name=%q}`, node, exe)
	err := backends.Eventually(60*time.Second, func() error {
		if err := sameEverywhere(ctx, stores, alert); err != nil {
			return err
		}
		if ss, _ := prom.Query(ctx, alert); len(ss) == 0 {
			return fmt.Errorf("%s: no alert yet", alert)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	as, err := vm.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firing := 0
	for _, a := range as {
		if a.Name == "BPFProgramRecursionMisses" && a.State == "firing" && a.Labels["instance"] == node && a.Labels["bpf_program_name"] == "canary" && a.Labels["process_executable_name"] == exe {
			firing++
		}
	}
	if firing != 1 {
		t.Errorf("vmalert has %d firing BPFProgramRecursionMisses alerts for the canary on %s, want 1: %+v", firing, node, as)
	}
	t.Logf("both stores fire BPFProgramRecursionMisses on the canary, %v after the backends were up", time.Since(start).Round(time.Millisecond))
	agent.stop(t)
}

// sameEverywhere checks that q returns at least one series and the same
// series and values from every store. Values within 1e-12 of each other:
// VictoriaMetrics keeps a float as a decimal (5.6519489999999995e-08 comes
// back as 5.651949e-08).
func sameEverywhere(ctx context.Context, stores []store, q string) error {
	var ref map[string]float64
	for i, s := range stores {
		ss, err := s.q.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		got := map[string]float64{}
		for _, x := range ss {
			got[labelString(x.Labels)] = x.Value
		}
		if len(got) == 0 {
			return fmt.Errorf("%s: %s: no series", s.name, q)
		}
		if i == 0 {
			ref = got
			continue
		}
		if !maps.EqualFunc(got, ref, func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b)) }) {
			return fmt.Errorf("%s: %s\n  %s has %v\n  %s has %v", s.name, q, stores[0].name, ref, s.name, got)
		}
	}
	return nil
}

func labelString(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&b, "%s=%q,", k, l[k])
	}
	return b.String()
}
