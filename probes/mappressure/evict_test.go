package mappressure

import (
	"errors"
	"runtime"
	"testing"

	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// loadOrSkip attaches the probe, or skips with the kernel's reason where
// the matrix did not measure it present.
func loadOrSkip(t *testing.T) *Probe {
	t.Helper()
	p, err := Load()
	if err != nil {
		var r *Refused
		if !errors.As(err, &r) {
			t.Fatalf("loading the probe: %v", err)
		}
		expect.SkipUnlessExpected(t, expect.FeatMapEvictions, errors.New(r.Reason()))
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mapID(t *testing.T, m *ebpf.Map) uint32 {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel reports no map id")
	}
	return uint32(id)
}

// entries walks the map's keys: the kernel's own count of what it kept.
func entries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k uint32
	n := 0
	it := m.Iterate()
	var v any = new(uint64)
	if m.Type() == ebpf.LRUCPUHash {
		v = new([]uint64)
	}
	for it.Next(&k, v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatalf("walking %s: %v", m, err)
	}
	return n
}

// putFromUser writes keys 0..m-1 with bpf(BPF_MAP_UPDATE_ELEM).
func putFromUser(t *testing.T, lru *ebpf.Map, m int) {
	t.Helper()
	var v any = uint64(1)
	if lru.Type() == ebpf.LRUCPUHash {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			t.Fatal(err)
		}
		v = make([]uint64, n)
	}
	for k := range m {
		if err := lru.Put(uint32(k), v); err != nil {
			t.Fatalf("putting key %d of %d: %v", k, m, err)
		}
	}
}

// putFromProgram writes keys 0..m-1 from a BPF program: an XDP program run
// m times by BPF_PROG_TEST_RUN, each run inserting the next key (kept in an
// array) and counting refused inserts beside it.
func putFromProgram(t *testing.T, lru *ebpf.Map, m int) {
	t.Helper()
	prog, next := inserter(t, lru)
	if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64), Repeat: uint32(m)}); err != nil {
		t.Fatalf("running the inserting program: %v", err)
	}
	var got struct{ Next, Refused uint32 }
	if err := next.Lookup(uint32(0), &got); err != nil {
		t.Fatal(err)
	}
	if got.Next != uint32(m) || got.Refused != 0 {
		t.Fatalf("the program inserted %d keys, %d refused; want %d, 0", got.Next, got.Refused, m)
	}
}

// inserter loads the XDP program that inserts the next key into lru at
// each run, and the array that holds the next key and the refusals; both
// are closed with the test.
func inserter(t testing.TB, lru *ebpf.Map) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	next, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close() })
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, next.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word), // the key
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, 1),
		asm.StoreMem(asm.R6, 0, asm.R4, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R3, asm.Word),
		asm.Mov.Imm(asm.R5, 1),
		asm.StoreMem(asm.RFP, -16, asm.R5, asm.DWord),
		asm.LoadMapPtr(asm.R1, lru.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R6, 4, asm.Word), // refused inserts
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R6, 4, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("out"), // XDP_PASS
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("loading the inserting program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, next
}

// TestEvictionsKnownAnswer fills LRU maps of n entries with m > n distinct
// keys, from user space and from a program, and holds the probe's count
// for each map to what the kernel's own entry count implies: every key
// was accepted and none deleted, so m minus the entries the map kept were
// evicted. A map that did not fill counts nothing.
func TestEvictionsKnownAnswer(t *testing.T) {
	p := loadOrSkip(t)
	cpus := runtime.NumCPU()
	cases := []struct {
		name  string
		typ   ebpf.MapType
		flags uint32
		n, m  int
		prog  bool
	}{
		{"lru user", ebpf.LRUHash, 0, 1000, 5000, false},
		{"lru program", ebpf.LRUHash, 0, 1000, 5000, true},
		{"lru_percpu user", ebpf.LRUCPUHash, 0, 512, 3000, false},
		{"lru_percpu program", ebpf.LRUCPUHash, 0, 512, 3000, true},
		// Per-CPU LRU lists: each CPU's list holds n/cpus.
		{"lru no_common_lru user", ebpf.LRUHash, 2 /* BPF_F_NO_COMMON_LRU */, 256 * cpus, 2000 * cpus, false},
		{"lru not full", ebpf.LRUHash, 0, 4096, 100, false},
	}
	got := map[uint32]uint64{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lru, err := ebpf.NewMap(&ebpf.MapSpec{Type: c.typ, KeySize: 4, ValueSize: 8, MaxEntries: uint32(c.n), Flags: c.flags})
			if err != nil {
				t.Fatalf("creating %s: %v", c.typ, err)
			}
			defer lru.Close()
			id := mapID(t, lru)
			if c.prog {
				putFromProgram(t, lru, c.m)
			} else {
				putFromUser(t, lru, c.m)
			}
			kept := entries(t, lru)
			if err := p.Read(got); err != nil {
				t.Fatal(err)
			}
			want := uint64(c.m - kept)
			t.Logf("%s: %d evicted (%d keys into %d entries, %d kept)", c.name, got[id], c.m, c.n, kept)
			if got[id] != want {
				t.Fatalf("map %d (%s, %d entries, %d distinct keys): probe counted %d evictions, the kernel kept %d entries so %d were evicted", id, c.typ, c.n, c.m, got[id], kept, want)
			}
			if err := p.Forget([]uint32{id}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if d, err := p.Dropped(); err != nil || d != 0 {
		t.Fatalf("dropped evictions: %d, %v", d, err)
	}
}
