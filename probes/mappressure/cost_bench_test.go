//go:build bench

package mappressure

import (
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// TestEvictionCost measures what the eviction counter adds to an insert
// into a full LRU hash map (each insert of a new key evicts one entry, in
// the LRU's batches): the same program inserting distinct keys, run by
// BPF_PROG_TEST_RUN in rounds that alternate the probe detached and
// attached (twins in one window), medians compared. make bench only: it
// times the machine.
func TestEvictionCost(t *testing.T) {
	lru, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 10000})
	if err != nil {
		t.Fatal(err)
	}
	defer lru.Close()
	prog, _ := inserter(t, lru)
	const runs = 200000
	round := func() time.Duration {
		_, d, err := prog.Benchmark(make([]byte, 64), runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	round() // fill the map: every later insert evicts
	var off, on []time.Duration
	for range 7 {
		off = append(off, round())
		p := loadOrSkip(t)
		on = append(on, round())
		p.Close()
	}
	slices.Sort(off)
	slices.Sort(on)
	mo, mn := off[len(off)/2], on[len(on)/2]
	t.Logf("insert into a full LRU (evicting): %v per insert without the probe, %v with it: %+.1f ns per insert (rounds of %d, medians of 7)", mo, mn, float64(mn-mo), runs)
}

// TestRefusalCost measures what the refused-update counter adds to every
// update of a hash map (it runs on each one, refused or not): the same
// program updating 200,000 existing keys of a hash map, rounds
// alternating the probe detached and attached, medians compared.
func TestRefusalCost(t *testing.T) {
	const runs = 200000
	h, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: runs})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	prog, next := inserter(t, h)
	round := func() time.Duration {
		if err := next.Put(uint32(0), uint64(0)); err != nil {
			t.Fatal(err)
		}
		_, d, err := prog.Benchmark(make([]byte, 64), runs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	round() // every later update replaces a key
	var off, on []time.Duration
	for range 7 {
		off = append(off, round())
		r, err := LoadRefusals()
		if err != nil {
			t.Skipf("refused-update counter: %v", err)
		}
		on = append(on, round())
		r.Close()
	}
	slices.Sort(off)
	slices.Sort(on)
	mo, mn := off[len(off)/2], on[len(on)/2]
	t.Logf("update of an existing key in a hash map: %v per update without the probe, %v with it: %+.1f ns per update (rounds of %d, medians of 7)", mo, mn, float64(mn-mo), runs)
}
