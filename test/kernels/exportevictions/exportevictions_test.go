package exportevictions

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/mapview"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/guestagent"
)

const interval = 500 * time.Millisecond

func TestExportEvictions(t *testing.T) {
	metrics := os.Getenv(MetricsEnv)
	if metrics == "" {
		t.Skipf("%s not set: exporter/e2e's TestGuestMapEvictions runs this in a guest with a Prometheus to export to", MetricsEnv)
	}
	instance := guestagent.Instance()
	// The agent's defaults (workload level, --map-pressure on) but for
	// --map-refusals (opt-in) and the intervals: maps read every second
	// rather than every 30 s, so the test waits seconds, not a minute.
	ag := guestagent.Start(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + metrics,
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_METRIC_EXPORT_INTERVAL=500",
		"OTEL_RESOURCE_ATTRIBUTES=service.instance.id=" + instance,
	}, "--interval", interval.String(), "--map-interval", "1s", "--map-refusals")

	// The first read of the maps says whether this kernel lets the agent
	// count evictions and refusals.
	var ml mapview.List
	guestagent.Wait(t, 60*time.Second, "the agent's first read of the maps", func() error {
		if err := guestagent.Get("/v1/maps", &ml); err != nil {
			return err
		}
		if ml.Scan.Source == "" {
			return fmt.Errorf("maps not read yet: %+v", ml.Scan)
		}
		return nil
	})
	if r := ml.Scan.EvictionsReason; r != "" {
		expect.SkipUnlessExpected(t, expect.FeatMapEvictions, errors.New(r))
	}
	if r := ml.Scan.RefusedReason; r != "" {
		expect.SkipUnlessExpected(t, expect.FeatMapRefusals, errors.New(r))
	}

	mk := func(name string, typ ebpf.MapType, n uint32) (*ebpf.Map, uint32) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: typ, KeySize: 4, ValueSize: 8, MaxEntries: n})
		if err != nil {
			t.Fatalf("making %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		return m, uint32(id)
	}
	lru, lruID := mk(LRUName, ebpf.LRUHash, LRUSize)
	hash, hashID := mk(HashName, ebpf.Hash, HashSize)
	for k := range uint32(LRUKeys) {
		if err := lru.Put(k, uint64(k)); err != nil {
			t.Fatalf("putting key %d in the LRU map: %v", k, err)
		}
	}
	refused := 0
	for k := range uint32(HashKeys) {
		switch err := hash.Put(k, uint64(k)); {
		case errors.Is(err, unix.E2BIG):
			refused++
		case err != nil:
			t.Fatalf("putting key %d in the hash map: %v", k, err)
		}
	}
	// The kernel's own answer: what the LRU map kept, by walking it.
	kept := 0
	var k uint32
	var v uint64
	it := lru.Iterate()
	for it.Next(&k, &v) {
		kept++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("walking the LRU map: %v", err)
	}
	evicted := LRUKeys - kept
	if evicted <= 0 || refused != HashKeys-HashSize {
		t.Fatalf("the kernel kept %d of %d keys in an LRU map of %d and refused %d of %d in a hash map of %d: nothing to count", kept, LRUKeys, LRUSize, refused, HashKeys, HashSize)
	}

	// The agent's own view first: a wrong count here is the probe's, not
	// the export's.
	guestagent.Wait(t, 30*time.Second, "the agent's counts equal to the kernel's", func() error {
		if err := guestagent.Get("/v1/maps", &ml); err != nil {
			return err
		}
		var le, hr uint64
		for _, m := range ml.Maps {
			switch {
			case m.ID == lruID && m.Evictions != nil:
				le = *m.Evictions
			case m.ID == hashID && m.RefusedUpdates != nil:
				hr = *m.RefusedUpdates
			}
		}
		if le != uint64(evicted) || hr != uint64(refused) {
			return fmt.Errorf("agent: map %d evicted %d (kernel %d), map %d refused %d (kernel %d)", lruID, le, evicted, hashID, hr, refused)
		}
		return nil
	})
	// Two export intervals, then the shutdown flushes.
	time.Sleep(4 * interval)
	ag.Stop(t)
	var u unix.Utsname
	unix.Uname(&u)
	// What the host half checks Prometheus against.
	for k, v := range map[string]any{"instance": instance, "os_version": unix.ByteSliceToString(u.Release[:]),
		"lru_id": lruID, "hash_id": hashID, "lru_kept": kept, "evicted": evicted, "refused": refused} {
		t.Logf("metric %s%s=%v", MetricPrefix, k, v)
	}
}
