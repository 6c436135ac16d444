package mapstats

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// TestMemoryRule checks memoryRule against the kernel: a map the rule
// reads once keeps its fdinfo memlock while filled and emptied; one it
// reads by count or always changes it with its elements, and the Reader's
// figure follows.
func TestMemoryRule(t *testing.T) {
	cpus := ebpfPossibleCPUs(t)
	usage := hasMapMemUsage(t)
	t.Logf("map_mem_usage in kernel BTF: %v", usage)
	inner := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	type lpmKey struct {
		Prefix uint32
		Addr   uint32
	}
	for _, tc := range []struct {
		spec ebpf.MapSpec
		key  func(i int) any
		val  func(i int) any
	}{
		{spec: ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 32}},
		{spec: ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 32, Flags: bpfFNoPrealloc}},
		{spec: ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 32}, val: func(int) any { return make([]uint64, cpus) }},
		{spec: ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 32, Flags: bpfFNoPrealloc}, val: func(int) any { return make([]uint64, cpus) }},
		{spec: ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 32}},
		{spec: ebpf.MapSpec{Type: ebpf.LRUCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 32}, val: func(int) any { return make([]uint64, cpus) }},
		{spec: ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 32}},
		{spec: ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 32}, val: func(int) any { return make([]uint64, cpus) }},
		{spec: ebpf.MapSpec{Type: ebpf.HashOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 32, InnerMap: inner}},
		{spec: ebpf.MapSpec{Type: ebpf.HashOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 32, Flags: bpfFNoPrealloc, InnerMap: inner}},
		{spec: ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 32, InnerMap: inner}},
		{spec: ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: 8, ValueSize: 8, MaxEntries: 32, Flags: bpfFNoPrealloc},
			key: func(i int) any { return lpmKey{Prefix: 32, Addr: uint32(i)} }},
	} {
		spec := tc.spec
		t.Run(spec.Type.String()+flagName(spec.Flags), func(t *testing.T) {
			m, err := ebpf.NewMap(&spec)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var inners []*ebpf.Map
			defer func() {
				for _, im := range inners {
					im.Close()
				}
			}()
			key := func(i int) any { return uint32(i) }
			if tc.key != nil {
				key = tc.key
			}
			val := func(i int) any { return uint64(i) }
			switch {
			case tc.val != nil:
				val = tc.val
			case spec.InnerMap != nil:
				val = func(int) any {
					im, err := ebpf.NewMap(inner)
					if err != nil {
						t.Fatal(err)
					}
					inners = append(inners, im)
					return im
				}
			}
			rule := memoryRule(spec.Type, spec.Flags)
			empty := bpfmaps.Memlock(t, m.FD())
			for i := range 20 {
				if err := m.Put(key(i), val(i)); err != nil {
					t.Fatalf("putting %d: %v", i, err)
				}
			}
			filled := bpfmaps.Memlock(t, m.FD())
			r := newReader(t, Options{})
			got := readOne(t, r, m)
			if !got.MemoryKnown || got.Memory != filled {
				t.Errorf("reader's memory %d (%v), fdinfo %d", got.Memory, got.MemoryKnown, filled)
			}
			if spec.Type != ebpf.Array && spec.Type != ebpf.PerCPUArray && spec.Type != ebpf.ArrayOfMaps {
				for i := range 10 {
					if err := m.Delete(key(i)); err != nil {
						t.Fatalf("deleting %d: %v", i, err)
					}
				}
			}
			drained := bpfmaps.Memlock(t, m.FD())
			t.Logf("memlock empty %d, 20 elements %d, 10 deleted %d", empty, filled, drained)
			if changed, moves := empty != filled || filled != drained, rule != memFixed && usage; changed != moves {
				t.Errorf("rule %d, but memlock empty %d, filled %d, drained %d", rule, empty, filled, drained)
			}
			// The second read: fixed figures from the cache, others again.
			got = readOne(t, r, m)
			if !got.MemoryKnown || got.Memory != drained {
				t.Errorf("reader's memory after deletes %d (%v), fdinfo %d", got.Memory, got.MemoryKnown, drained)
			}
		})
	}
}

// hasMapMemUsage says the kernel has bpf_map_ops.map_mem_usage (6.4):
// before it fdinfo's memlock is an estimate from the map's shape, fixed
// for every type.
func hasMapMemUsage(t *testing.T) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("loading kernel BTF: %v", err)
	}
	var ops *btf.Struct
	if err := spec.TypeByName("bpf_map_ops", &ops); err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	for _, m := range ops.Members {
		if m.Name == "map_mem_usage" {
			return true
		}
	}
	return false
}

func flagName(f uint32) string {
	if f&bpfFNoPrealloc != 0 {
		return "_no_prealloc"
	}
	return ""
}

// readOne reads every map and returns m's entry.
func readOne(t *testing.T, r *Reader, m *ebpf.Map) Map {
	t.Helper()
	id, _ := mapID(t, m)
	maps, _, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range maps {
		if got.ID == id {
			return got
		}
	}
	t.Fatalf("map %d not read", id)
	return Map{}
}

// TestSteadyReadsNoFdinfo: a second read of unchanged fixed-memory maps
// reads no fdinfo for them. Other maps on the host may change under the
// test, so the refreshes are bounded by the maps whose rule is not fixed.
func TestSteadyReadsNoFdinfo(t *testing.T) {
	makeTruthMaps(t)
	r := newReader(t, Options{})
	first, _, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	before := r.Refreshes
	if before < len(first) {
		t.Errorf("first read: %d fdinfo reads for %d maps", before, len(first))
	}
	maps, _, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	notFixed := 0
	for _, m := range maps {
		if memoryRule(m.Type, m.Flags) != memFixed {
			notFixed++
		}
	}
	if n := r.Refreshes - before; n > notFixed+(len(maps)-len(first)) || n > len(maps)/2 {
		t.Errorf("steady read of %d maps read %d fdinfo entries; %d maps are not fixed-memory", len(maps), n, notFixed)
	}
}

// TestNoKfunc loads the iterator as on a kernel without
// bpf_map_sum_elem_count (6.1): the call is poisoned, bpf_ksym_exists() is
// false, the verifier drops the call, and no record claims a count.
func TestNoKfunc(t *testing.T) {
	spec, err := loadMapstats()
	if err != nil {
		t.Fatal(err)
	}
	p := &coreload.Program{Name: "mapstats", Object: _MapstatsBytes, Insns: spec.Programs["dump_map"].Instructions,
		Target: "bpf_map", Kfuncs: []string{kfuncSum}}
	key, err := coreload.KernelKey(p.Object)
	if err != nil {
		t.Fatal(err)
	}
	c, err := coreload.Relocate(p, key)
	if errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(t, expect.FeatMapIter, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Kfuncs[kfuncSum] = 0
	it, err := load(spec, c)
	if err != nil {
		t.Fatalf("loading without the kfunc: %v", err)
	}
	defer it.Close()
	m := makeTruthMaps(t)[2].m // t_hash_37
	id, _ := mapID(t, m)
	recs, err := it.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		if r.CountKnown || r.Count != 0 {
			t.Errorf("map %d: count %d (known %v) without the kfunc", r.ID, r.Count, r.CountKnown)
		}
		found = found || r.ID == id
	}
	if it.HasCount() || !found {
		t.Errorf("HasCount %v, test map read %v", it.HasCount(), found)
	}
}

// TestReadUnderChurn: maps made and freed while the Reader reads, on both
// paths: a map gone between the list and its fd is left out, never an
// error, and every map read has its memory.
func TestReadUnderChurn(t *testing.T) {
	for _, opts := range []Options{{}, {NoIterator: true, CountBound: 100}} {
		r := newReader(t, opts)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 16})
				if err != nil {
					t.Error(err)
					return
				}
				m.Close()
			}
		}()
		deadline := time.Now().Add(time.Second)
		reads := 0
		for time.Now().Before(deadline) {
			maps, _, err := r.Read()
			if err != nil {
				t.Errorf("read %d: %v", reads, err)
				break
			}
			for _, m := range maps {
				if !m.MemoryKnown {
					t.Errorf("map %d read without its memory", m.ID)
				}
			}
			reads++
		}
		close(stop)
		wg.Wait()
		t.Logf("options %+v: %d reads under churn", opts, reads)
	}
}
