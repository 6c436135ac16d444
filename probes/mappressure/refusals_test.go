package mappressure

import (
	"errors"
	"testing"

	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestRefusalsKnownAnswer gives hash maps of 64 entries 100 distinct keys,
// from user space and from a program, and holds the probe's count for each
// map to the refusals the callers were told (E2BIG): 36. An LRU map of the
// same size refuses none.
func TestRefusalsKnownAnswer(t *testing.T) {
	r, err := LoadRefusals()
	if err != nil {
		var rf *Refused
		if !errors.As(err, &rf) {
			t.Fatalf("loading the probe: %v", err)
		}
		expect.SkipUnlessExpected(t, expect.FeatMapRefusals, errors.New(rf.Reason()))
	}
	defer r.Close()
	if len(r.Missing) > 0 {
		if expect.Expected(expect.FeatMapRefusals) {
			t.Fatalf("targets refused where all were measured present: %v", r.Missing)
		}
		t.Logf("targets the kernel refused: %v", r.Missing)
	}
	cases := []struct {
		name string
		typ  ebpf.MapType
		prog bool
		want uint64
	}{
		{"hash user", ebpf.Hash, false, 36},
		{"hash program", ebpf.Hash, true, 36},
		{"percpu_hash user", ebpf.PerCPUHash, false, 36},
		{"percpu_hash program", ebpf.PerCPUHash, true, 36},
		{"lru_hash user", ebpf.LRUHash, false, 0},
	}
	got := map[uint32]RefusedCounts{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := ebpf.NewMap(&ebpf.MapSpec{Type: c.typ, KeySize: 4, ValueSize: 8, MaxEntries: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			id := mapID(t, m)
			var told uint64
			if c.prog {
				prog, next := inserter(t, m)
				if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: 100}); err != nil {
					t.Fatal(err)
				}
				var n struct{ Next, Refused uint32 }
				if err := next.Lookup(uint32(0), &n); err != nil {
					t.Fatal(err)
				}
				told = uint64(n.Refused)
			} else {
				told = putCounting(t, m, 100)
			}
			if err := r.Read(got); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d refused as full, %d out of memory; callers told %d", c.name, got[id].Full, got[id].NoMem, told)
			if told != c.want || got[id].Full != told || got[id].NoMem != 0 {
				t.Fatalf("map %d (%s, 64 entries, 100 distinct keys): probe counted %+v, callers were refused %d times, want %d", id, c.typ, got[id], told, c.want)
			}
			if err := r.Forget([]uint32{id}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if d, err := r.Dropped(); err != nil || d != 0 {
		t.Fatalf("dropped refusals: %d, %v", d, err)
	}
}

// putCounting writes keys 0..n-1 with bpf(BPF_MAP_UPDATE_ELEM) and returns
// how many the kernel refused with E2BIG.
func putCounting(t *testing.T, m *ebpf.Map, n int) uint64 {
	t.Helper()
	var v any = uint64(1)
	if m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash {
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			t.Fatal(err)
		}
		v = make([]uint64, cpus)
	}
	var refused uint64
	for k := range n {
		err := m.Put(uint32(k), v)
		switch {
		case errors.Is(err, unix.E2BIG):
			refused++
		case err != nil:
			t.Fatalf("putting key %d: %v", k, err)
		}
	}
	return refused
}
