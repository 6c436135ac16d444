package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/exporter/dashboards"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/kernels/exportevictions"
)

// TestGuestMapEvictions: an LRU map's evictions and a full hash map's
// refused updates reach a real Prometheus with the kernel's values, and
// the shipped rules see the evicting map. The host's kernel may refuse the
// agent's fexit probes (then the series are absent, which
// TestAgentToPrometheusAndJaeger allows), so the real bpfleet agent runs
// in the matrix's sid-amd64 guest, with its default workload level and
// --map-refusals, exporting over OTLP/HTTP to this Prometheus, which
// evaluates charts/bpfleet/files/bpfleet.rules.yaml every second. The
// guest fills an LRU map of 1,000 with 5,000 keys and a hash map of 64
// with 100: bpf_map_evictions_total must equal the keys put minus the keys
// the kernel kept, bpf_map_updates_refused_total the 36 updates the kernel
// refused with E2BIG, each series with only METRICS.md's labels, and
// BPFMapEvicting must be pending for the LRU map (its for: is 30 minutes,
// too long for a test: pending says the rule's expression returns the map).
func TestGuestMapEvictions(t *testing.T) {
	prom := backends.StartPrometheusWithRules(t, []string{filepath.Join("..", "..", "charts", "bpfleet", "files", "bpfleet.rules.yaml")})
	metricsURL := guestURL(prom.Addr, strings.TrimPrefix(prom.OTLPEndpoint(), "http://"+prom.Addr))
	got := runGuest(t, guestEntry, "./test/kernels/exportevictions", "TestExportEvictions", exportevictions.MetricPrefix,
		exportevictions.MetricsEnv+"="+metricsURL)
	for _, k := range []string{"instance", "os_version", "lru_id", "hash_id", "lru_kept", "evicted", "refused"} {
		if got[k] == "" {
			t.Fatalf("the guest reported no %s (its output above)", k)
		}
	}
	if want := exportevictions.HashKeys - exportevictions.HashSize; num(got["refused"]) != float64(want) {
		t.Fatalf("the guest's kernel refused %s updates of a hash map of %d given %d keys, want %d", got["refused"], exportevictions.HashSize, exportevictions.HashKeys, want)
	}

	// Each series holds the kernel's value under the map's name, with no
	// label but the level's attributes (METRICS.md) and the node's
	// resource labels.
	for _, c := range []struct{ metric, mapName, want string }{
		{"bpf.map.evictions", exportevictions.LRUName, got["evicted"]},
		{"bpf.map.updates.refused", exportevictions.HashName, got["refused"]},
	} {
		name, err := exporter.PrometheusName(c.metric)
		if err != nil {
			t.Fatal(err)
		}
		labels, err := exporter.PrometheusLabels(c.metric, exporter.LevelWorkload)
		if err != nil {
			t.Fatal(err)
		}
		sel := fmt.Sprintf(`%s{instance=%q, bpf_map_name=%q}`, name, got["instance"], c.mapName)
		var s backends.Sample
		err = backends.Eventually(30*time.Second, func() error {
			ss, err := prom.Query(context.Background(), sel)
			if err != nil {
				return err
			}
			if len(ss) != 1 || ss[0].Value != num(c.want) {
				return fmt.Errorf("%s: %v; want one series of %s, the guest kernel's count", sel, ss, c.want)
			}
			s = ss[0]
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for l := range s.Labels {
			if !slices.Contains(labels, l) && !slices.Contains(resourceLabels, l) {
				t.Errorf("%s has label %s, not among METRICS.md's %v: %v", sel, l, labels, s.Labels)
			}
		}
		t.Logf("Prometheus: %s = %v, labels %v", sel, s.Value, s.Labels)
	}

	// The shipped alert's expression returns the LRU map: BPFMapEvicting
	// pending for it (and only for it: the hash map does not evict).
	sel := fmt.Sprintf(`ALERTS{alertname="BPFMapEvicting", instance=%q}`, got["instance"])
	err := backends.Eventually(30*time.Second, func() error {
		ss, err := prom.Query(context.Background(), sel)
		if err != nil {
			return err
		}
		if len(ss) != 1 || ss[0].Labels["bpf_map_name"] != exportevictions.LRUName || ss[0].Labels["alertstate"] != "pending" {
			return fmt.Errorf("%s: %v; want it pending for map %s alone", sel, ss, exportevictions.LRUName)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each dashboard's Evicting maps panel shows the LRU map.
	for _, f := range []string{"bpfleet-node.json", "bpfleet-fleet.json"} {
		b, err := os.ReadFile(filepath.Join("../../charts/bpfleet/dashboards", f))
		if err != nil {
			t.Fatal(err)
		}
		qs, err := dashboards.Queries(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		q, ok := qs["Evicting maps A"]
		if !ok {
			t.Fatalf("%s has no Evicting maps panel", f)
		}
		q = dashboardVars(got["instance"]).Replace(q)
		err = backends.Eventually(30*time.Second, func() error {
			ss, err := prom.Query(context.Background(), q)
			if err != nil {
				return err
			}
			for _, s := range ss {
				if s.Labels["bpf_map_name"] == exportevictions.LRUName && s.Value > 0 {
					return nil
				}
			}
			return fmt.Errorf("%v; want map %s evicting", ss, exportevictions.LRUName)
		})
		if err != nil {
			t.Errorf("%s panel Evicting maps: %v\n%s", f, err, q)
		}
	}
	t.Logf("%s node %s: map %s evicted %s of %d keys (kept %s), map %s refused %s; BPFMapEvicting pending; the Evicting maps panels show it",
		got["os_version"], got["instance"], got["lru_id"], got["evicted"], exportevictions.LRUKeys, got["lru_kept"], got["hash_id"], got["refused"])
}

// resourceLabels are the labels every OTLP series has from the agent's
// resource: job and instance (service.name, service.instance.id) and the
// node facts test/backends' Prometheus promotes.
var resourceLabels = []string{"__name__", "job", "instance", "service_instance_id", "host_name", "os_version", "host_cpu_model_name", "k8s_node_name"}
