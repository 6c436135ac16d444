package ktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// TestAgentMapEvictions: the agent's maps read carries each LRU map's
// evictions equal to what the kernel's own entry count implies (keys put
// minus keys kept), for a map made before the agent (flagged as counted
// since the agent's start) and one made after; a plain hash map of 64
// given 100 keys has no evictions and the 36 refused updates its caller
// was told of (E2BIG).
func TestAgentMapEvictions(t *testing.T) {
	mk := func(typ ebpf.MapType, n uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: typ, KeySize: 4, ValueSize: 8, MaxEntries: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	older := mk(ebpf.LRUHash, 1000)
	a, err := agent.New(agent.Config{Maps: true, MapPressure: true, MapRefusals: true})
	if err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	defer a.Close()
	ctx := context.Background()
	snap, err := a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.MapScan.EvictionsReason; r != "" {
		expect.SkipUnlessExpected(t, expect.FeatMapEvictions, errors.New(r))
	}
	if r := snap.MapScan.RefusedReason; r != "" {
		expect.SkipUnlessExpected(t, expect.FeatMapRefusals, errors.New(r))
	}
	newer, plain := mk(ebpf.LRUHash, 1000), mk(ebpf.Hash, 64)
	refused := uint64(0)
	put := func(m *ebpf.Map, keys int) int {
		for k := range keys {
			err := m.Put(uint32(k), uint64(k))
			switch {
			case m == plain && errors.Is(err, unix.E2BIG):
				refused++
			case err != nil:
				t.Fatalf("putting key %d: %v", k, err)
			}
		}
		n := 0
		var k uint32
		var v uint64
		for it := m.Iterate(); it.Next(&k, &v); {
			n++
		}
		return n
	}
	keptOld, keptNew := put(older, 5000), put(newer, 3000)
	put(plain, 100)
	time.Sleep(10 * time.Millisecond) // a rate needs time between the reads
	snap, err = a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint32]*agent.Map{}
	for _, m := range snap.Maps {
		byID[m.ID] = m
	}
	for _, c := range []struct {
		m          *ebpf.Map
		want       uint64
		sinceStart bool
	}{{older, uint64(5000 - keptOld), true}, {newer, uint64(3000 - keptNew), false}} {
		info, _ := c.m.Info()
		id, _ := info.ID()
		m := byID[uint32(id)]
		if m == nil || m.Evictions == nil {
			t.Fatalf("map %d: no evictions in the snapshot: %+v", id, m)
		}
		t.Logf("map %d: %d evicted (%d wanted), since agent start %v, rate known %v", id, *m.Evictions, c.want, m.PressureSinceStart, m.EvictionsPerSecond != nil)
		if *m.Evictions != c.want || m.PressureSinceStart != c.sinceStart {
			t.Fatalf("map %d: %d evictions (since agent start: %v), want %d (%v)", id, *m.Evictions, m.PressureSinceStart, c.want, c.sinceStart)
		}
		if c.sinceStart && (m.EvictionsPerSecond == nil || *m.EvictionsPerSecond <= 0) {
			t.Fatalf("map %d: evicted %d between two reads but its rate is %v", id, c.want, m.EvictionsPerSecond)
		}
	}
	info, _ := plain.Info()
	id, _ := info.ID()
	m := byID[uint32(id)]
	if m == nil || m.Evictions != nil || m.RefusedUpdates == nil {
		t.Fatalf("plain hash map %d: want it listed with refused updates and without evictions, got %+v", id, m)
	}
	t.Logf("map %d: %d refused updates, callers told %d", id, *m.RefusedUpdates, refused)
	if refused != 36 || *m.RefusedUpdates != refused {
		t.Fatalf("plain hash map %d (64 entries, 100 keys): %d refused updates counted, callers told %d, want 36", id, *m.RefusedUpdates, refused)
	}
}
