// Package bpfmaps creates the maps that tests of the maps view hold
// bpfleet's answers against: a hash map filled to a known count, an array
// and a ring buffer, all named by one loaded program, with the kernel's own
// figures read back from the test's fds. Only tests import it.
package bpfmaps

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Set is the test's maps and the program that uses them.
type Set struct {
	Hash, Array, RingBuf *ebpf.Map
	Prog                 *ebpf.Program
	ProgID               uint32
	// HashEntries is how many elements were put in Hash (of HashMax).
	HashEntries, HashMax int
}

// New creates the set, each map and the program named prefix+suffix
// (prefix at most 11 characters: the kernel keeps 15), with entries
// elements in a hash map of max entries. Everything is closed at the end
// of the test.
func New(t testing.TB, prefix string, entries, max int) *Set {
	t.Helper()
	s := &Set{HashEntries: entries, HashMax: max}
	mk := func(spec *ebpf.MapSpec) *ebpf.Map {
		t.Helper()
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("creating map %s: %v", spec.Name, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	s.Hash = mk(&ebpf.MapSpec{Name: prefix + "_h", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: uint32(max)})
	s.Array = mk(&ebpf.MapSpec{Name: prefix + "_a", Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 16})
	s.RingBuf = mk(&ebpf.MapSpec{Name: prefix + "_r", Type: ebpf.RingBuf, MaxEntries: 64 << 10})
	for k := 0; k < entries; k++ {
		if err := s.Hash.Put(uint32(k), uint64(k)); err != nil {
			t.Fatalf("filling %s: %v", prefix+"_h", err)
		}
	}
	// A socket filter that names every map (a map fd load each): the
	// kernel records them in its map_ids.
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: prefix + "_p", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, s.Hash.FD()),
			asm.LoadMapPtr(asm.R1, s.Array.FD()),
			asm.LoadMapPtr(asm.R1, s.RingBuf.FD()),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}})
	if err != nil {
		t.Fatalf("loading %s: %v", prefix+"_p", err)
	}
	t.Cleanup(func() { p.Close() })
	s.Prog = p
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	s.ProgID = uint32(id)
	return s
}

// Maps are the set's maps: hash, array, ring buffer.
func (s *Set) Maps() []*ebpf.Map { return []*ebpf.Map{s.Hash, s.Array, s.RingBuf} }

// MapID is the kernel's id of m.
func MapID(t testing.TB, m *ebpf.Map) uint32 {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel gives no map id")
	}
	return uint32(id)
}

// Memlock is the kernel's memory figure for a map or a program: memlock:
// in the fdinfo of the test's own fd.
func Memlock(t testing.TB, fd int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no memlock: in %q", b)
	return 0
}
