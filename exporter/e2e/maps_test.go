package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

// wantValue waits until q returns one sample equal to want.
func wantValue(t *testing.T, prom *backends.Prometheus, q string, want float64) {
	t.Helper()
	err := backends.Eventually(30*time.Second, func() error {
		ss, err := prom.Query(context.Background(), q)
		if err != nil {
			return err
		}
		if len(ss) != 1 {
			return fmt.Errorf("%s: %d series %v, want 1", q, len(ss), ss)
		}
		if ss[0].Value != want {
			return fmt.Errorf("%s = %v, want %v", q, ss[0].Value, want)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// holdHashMap makes a hash map with entries for the test's life: the
// agent exports bpf_map_entries and bpf_map_fullness_ratio only for the
// hash family, which a host need not have, and the name and dashboard
// checks want every metric.
func holdHashMap(t *testing.T) {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "e2e_held_h", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for k := uint32(0); k < 3; k++ {
		if err := m.Put(k, k); err != nil {
			t.Fatal(err)
		}
	}
	// An LRU map, so that where the kernel allows the eviction counter
	// the evictions panels have a series (0 evictions).
	lru, err := ebpf.NewMap(&ebpf.MapSpec{Name: "e2e_held_lru", Type: ebpf.LRUHash, KeySize: 4, ValueSize: 4, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lru.Close() })
}

// TestMapsToPrometheus: a hash map with 10 entries of 64, an array and a
// ring buffer (test/bpfmaps), all used by one socket filter this test holds, reach a real Prometheus
// over OTLP from two agents, one per metrics level. At the program level
// the hash map's bpf_map_entries is the inserted count and each map's
// bpf_map_memory_bytes the test's own fdinfo memlock; the program's
// memory is its JIT image and memlock (which holds its instructions), plus its maps once.
// At the workload level the same figures are in series keyed by map name,
// type and executable, without ids. The node total of maps is the sum over
// every map once.
func TestMapsToPrometheus(t *testing.T) {
	// A hash map with 10 of 64 entries, an array and a ring buffer, named
	// by one socket filter that is never attached: what it costs is its
	// memory, not its runs.
	const entries = 10
	set := bpfmaps.New(t, "e2e_maps", entries, 64)
	hash, arr, prog := set.Hash, set.Array, set.Prog
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := info.ID()
	hinfo, err := hash.Info()
	if err != nil {
		t.Fatal(err)
	}
	hid, _ := hinfo.ID()
	jited, err := info.JitedSize()
	if err != nil {
		t.Fatal(err)
	}
	xlated, err := info.TranslatedSize()
	if err != nil {
		t.Fatal(err)
	}
	hmem, amem, rmem, pmem := bpfmaps.Memlock(t, hash.FD()), bpfmaps.Memlock(t, arr.FD()), bpfmaps.Memlock(t, set.RingBuf.FD()), bpfmaps.Memlock(t, prog.FD())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exeName := filepath.Base(exe)
	t.Logf("program %d (jited %d, xlated %d, memlock %d); hash map %d memlock %d, array memlock %d, ring buffer memlock %d; owner %s", pid, jited, xlated, pmem, hid, hmem, amem, rmem, exeName)

	prom := backends.StartPrometheus(t)
	// Both agents read the maps at every scan: the node totals below are
	// compared with the map series of the same export, and the two
	// agents' reads with each other, so every map series is in every
	// export (the defaults, a read every 30 s and a series that did not
	// move pushed every 30 s, are TestMapInterval's and TestGaugesResent').
	for node, level := range map[string]string{"e2e-maps-program": "program", "e2e-maps-workload": "workload"} {
		startAgent(t, []string{
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + prom.OTLPEndpoint(),
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
			"OTEL_TRACES_EXPORTER=none",
			"K8S_NODE_NAME=" + node,
		}, "--metrics-level", level, "--map-interval", "0", "--resend-unchanged", "0")
	}

	// The program level: by id.
	sel := fmt.Sprintf(`instance="e2e-maps-program", bpf_map_id="%d"`, hid)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_entries{%s}`, sel), entries)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_max_entries{%s}`, sel), 64)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_fullness_ratio{%s}`, sel), float64(entries)/64)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_memory_bytes{%s, bpf_map_name="e2e_maps_h", bpf_map_type="hash", process_executable_name=%q}`, sel, exeName), float64(hmem))
	wantValue(t, prom, `bpf_map_memory_bytes{instance="e2e-maps-program", bpf_map_name="e2e_maps_a", bpf_map_type="array"}`, float64(amem))
	wantValue(t, prom, `bpf_map_entries{instance="e2e-maps-program", bpf_map_name="e2e_maps_a"}`+" or vector(-1)", -1) // an array has no count
	psel := fmt.Sprintf(`instance="e2e-maps-program", bpf_program_id="%d"`, pid)
	wantValue(t, prom, fmt.Sprintf(`bpf_program_memory_bytes{%s, bpf_memory_kind="program"}`, psel), float64(uint64(jited)+pmem))
	wantValue(t, prom, fmt.Sprintf(`bpf_program_memory_bytes{%s, bpf_memory_kind="map"}`, psel), float64(hmem+amem+rmem))
	if n, ok := info.VerifiedInstructions(); ok {
		wantValue(t, prom, fmt.Sprintf(`bpf_program_verified_insns{%s}`, psel), float64(n))
	}

	// The workload level: the same figures, keyed without ids.
	wsel := fmt.Sprintf(`instance="e2e-maps-workload", bpf_map_name="e2e_maps_h", bpf_map_type="hash", process_executable_name=%q`, exeName)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_entries{%s}`, wsel), entries)
	wantValue(t, prom, fmt.Sprintf(`bpf_map_memory_bytes{%s}`, wsel), float64(hmem))
	wantValue(t, prom, fmt.Sprintf(`bpf_map_fullness_ratio{%s}`, wsel), float64(entries)/64)
	wantValue(t, prom, fmt.Sprintf(`count(bpf_map_entries{%s, bpf_map_id!=""}) or vector(0)`, wsel), 0)
	wantValue(t, prom, `bpf_program_memory_bytes{instance="e2e-maps-workload", bpf_program_name="e2e_maps_p", bpf_memory_kind="map"}`, float64(hmem+amem+rmem))
	wantValue(t, prom, `bpf_program_memory_bytes{instance="e2e-maps-workload", bpf_program_name="e2e_maps_p", bpf_memory_kind="program"}`, float64(uint64(jited)+pmem))

	// The node's maps: every map once, at each level the same total. At the
	// program level a map used by programs of two owners has two series of
	// one id: max by id counts it once. Only the series of the latest
	// export (within half an export interval of the node total's sample):
	// OTLP writes no staleness marker, so a freed map's series stays in
	// instant queries for 5 minutes. Retried: a map made or freed between
	// the two agents' scans (the calibration's) moves one side.
	latest := func(node string) string {
		return fmt.Sprintf(`(bpf_map_memory_bytes{instance="e2e-maps-program"} and (timestamp(bpf_map_memory_bytes{instance="e2e-maps-program"}) > scalar(timestamp(bpf_node_memory_bytes{instance=%q, bpf_memory_kind="map"})) - 0.25))`, node)
	}
	for _, node := range []string{"e2e-maps-program", "e2e-maps-workload"} {
		err := backends.Eventually(30*time.Second, func() error {
			total, err := prom.Query(context.Background(), fmt.Sprintf(`bpf_node_memory_bytes{instance=%q, bpf_memory_kind="map"}`, node))
			if err != nil || len(total) != 1 {
				return fmt.Errorf("node total: %v, %v", total, err)
			}
			sum, err := prom.Query(context.Background(), fmt.Sprintf(`sum(max by (bpf_map_id) %s)`, latest(node)))
			if err != nil || len(sum) != 1 {
				return fmt.Errorf("sum over maps: %v, %v", sum, err)
			}
			count, err := prom.Query(context.Background(), fmt.Sprintf(`bpf_agent_maps{instance=%q}`, node))
			if err != nil || len(count) != 1 {
				return fmt.Errorf("map count: %v, %v", count, err)
			}
			ids, err := prom.Query(context.Background(), fmt.Sprintf(`count(count by (bpf_map_id) %s)`, latest(node)))
			if err != nil || len(ids) != 1 {
				return fmt.Errorf("map ids: %v, %v", ids, err)
			}
			if total[0].Value != sum[0].Value || count[0].Value != ids[0].Value {
				return fmt.Errorf("%s: node total %v bytes over %v maps; the program level's maps, each once, %v bytes over %v", node, total[0].Value, count[0].Value, sum[0].Value, ids[0].Value)
			}
			t.Logf("%s: node maps %v bytes over %v maps, as the sum over every map once", node, total[0].Value, count[0].Value)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}
