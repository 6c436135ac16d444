package mapstats

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/test/bpfmaps"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// truthMap is one map the truth tests make, with what they put in it.
type truthMap struct {
	name string
	m    *ebpf.Map
	// inserted is how many keys were written; for an LRU filled past
	// capacity the kernel keeps fewer, so the truth is counted again by
	// walking the keys (keysNow).
	inserted int
	lru      bool
}

// makeTruthMaps makes one map of every type the issue lists, filled to a
// known count.
func makeTruthMaps(t testing.TB) []truthMap {
	t.Helper()
	var out []truthMap
	mk := func(name string, spec *ebpf.MapSpec, fill int, lru bool) *ebpf.Map {
		t.Helper()
		spec.Name = name
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		percpu := spec.Type == ebpf.PerCPUHash || spec.Type == ebpf.LRUCPUHash
		for k := range fill {
			var err error
			if percpu {
				vals := make([]uint64, ebpfPossibleCPUs(t))
				err = m.Put(uint32(k), vals)
			} else {
				err = m.Put(uint32(k), uint64(k))
			}
			if err != nil {
				t.Fatalf("%s: putting key %d: %v", name, k, err)
			}
		}
		out = append(out, truthMap{name: name, m: m, inserted: fill, lru: lru})
		return m
	}
	hash := func(max uint32, flags uint32) *ebpf.MapSpec {
		return &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: max, Flags: flags}
	}
	mk("t_hash_0", hash(64, 0), 0, false)
	mk("t_hash_1", hash(64, 0), 1, false)
	mk("t_hash_37", hash(64, 0), 37, false)
	mk("t_hash_max", hash(64, 0), 64, false)
	mk("t_hash_noprealloc", hash(64, bpfFNoPrealloc), 20, false)
	mk("t_lru_past", &ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 128}, 1000, true)
	mk("t_percpu_hash", &ebpf.MapSpec{Type: ebpf.PerCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64}, 10, false)
	mk("t_lru_percpu", &ebpf.MapSpec{Type: ebpf.LRUCPUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64}, 10, true)
	mk("t_array", &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 64}, 5, false)
	mk("t_percpu_array", &ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 64}, 0, false)
	mk("t_ringbuf", &ebpf.MapSpec{Type: ebpf.RingBuf, MaxEntries: 64 << 10}, 0, false)
	mk("t_perf_array", &ebpf.MapSpec{Type: ebpf.PerfEventArray}, 0, false)
	inner := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
	aom := mk("t_array_of_maps", &ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 8, InnerMap: inner}, 0, false)
	hom := mk("t_hash_of_maps", &ebpf.MapSpec{Type: ebpf.HashOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: 8, InnerMap: inner}, 0, false)
	for k := range 3 {
		im, err := ebpf.NewMap(inner)
		if err != nil {
			t.Fatal(err)
		}
		if err := aom.Put(uint32(k), im); err != nil {
			t.Fatal(err)
		}
		if err := hom.Put(uint32(k), im); err != nil {
			t.Fatal(err)
		}
		im.Close() // the outer maps hold it
	}
	out[len(out)-1].inserted = 3
	return out
}

func ebpfPossibleCPUs(t testing.TB) int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// keysNow counts m's keys with cilium/ebpf's iterator: the truth for an
// LRU, which evicts as it is filled.
func keysNow(t testing.TB, m *ebpf.Map) int {
	t.Helper()
	n := 0
	var k uint32
	it := m.Iterate()
	if info, _ := m.Info(); info != nil && (info.Type == ebpf.LRUCPUHash || info.Type == ebpf.PerCPUHash) {
		var v []uint64
		for it.Next(&k, &v) {
			n++
		}
	} else {
		var v []byte
		for it.Next(&k, &v) {
			n++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("walking keys: %v", err)
	}
	return n
}

// mapsDebug reads cur_entries by map id from bpffs' preloaded maps.debug
// (kernel/bpf/preload, CONFIG_BPF_PRELOAD: every bpffs mount gets it),
// mounting a bpffs of its own when /sys/fs/bpf has none. nil with the
// kernel's reason when it cannot be read.
func mapsDebug(t testing.TB) (map[uint32]int64, error) {
	t.Helper()
	path := "/sys/fs/bpf/maps.debug"
	if _, err := os.Stat(path); err != nil {
		dir := t.TempDir()
		if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
			return nil, fmt.Errorf("mounting bpffs: %w", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, 0) })
		path = filepath.Join(dir, "maps.debug")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[uint32]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "%4u %-16s %10d %10lld": id, name, max_entries, cur_entries.
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue
		}
		id, err1 := strconv.ParseUint(fs[0], 10, 32)
		cur, err2 := strconv.ParseInt(fs[len(fs)-1], 10, 64)
		if err1 == nil && err2 == nil {
			out[uint32(id)] = cur
		}
	}
	return out, sc.Err()
}

func mapID(t testing.TB, m *ebpf.Map) (uint32, *ebpf.MapInfo) {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id), info
}

func newReader(t testing.TB, opts Options) *Reader {
	t.Helper()
	r, err := NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if !opts.NoIterator && !r.source.Iterator {
		expect.SkipUnlessExpected(t, expect.FeatMapIter, errors.New(r.source.Reason))
	}
	return r
}

// TestTruth: every map the test made, read by the iterator and by the
// syscall walk, against the kernel's own answers: entries against what
// was inserted (for an LRU, what it kept, and bpffs' maps.debug where it
// can be read), memory against the fdinfo memlock of the test's own fd,
// every other field against bpf_map_info.
func TestTruth(t *testing.T) {
	maps := makeTruthMaps(t)
	debug, debugErr := mapsDebug(t)
	if debugErr != nil {
		t.Logf("maps.debug not compared: %v", debugErr)
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"iterator", Options{}},
		// Every record count-only from the first read, as for maps the
		// last read skipped: shapes and memory by syscall.
		{"iterator, none held", Options{}},
		{"syscalls", Options{NoIterator: true}},
		{"syscalls counted", Options{NoIterator: true, CountBound: 10000}},
		{"syscalls bounded", Options{NoIterator: true, CountBound: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(t, tc.opts)
			if tc.name == "iterator, none held" {
				if err := r.it.SetKnownMaxID(1<<31 - 1); err != nil {
					t.Fatal(err)
				}
			}
			debugCompared := 0
			defer func() {
				if debug != nil {
					t.Logf("maps.debug: %d counts compared", debugCompared)
				}
			}()
			// Twice: the second read has count-only records for every map
			// the first read gave whole (SetKnownMaxID).
			for pass := range 2 {
				got, src, err := r.Read()
				if err != nil {
					t.Fatal(err)
				}
				if src.Iterator == tc.opts.NoIterator || (src.Iterator != (src.Reason == "")) {
					t.Fatalf("source %+v for options %+v", src, tc.opts)
				}
				byID := map[uint32]Map{}
				for _, m := range got {
					byID[m.ID] = m
				}
				hasCount := r.it != nil && r.it.HasCount()
				if r.it != nil && !hasCount {
					if expect.Expected(expect.FeatMapCount) {
						t.Fatalf("%s on %s, where the kfunc was measured present", ReasonNoKfunc, expect.Entry())
					}
					t.Logf("entries absent: %s", ReasonNoKfunc)
				}
				for _, tm := range maps {
					id, info := mapID(t, tm.m)
					m, ok := byID[id]
					if !ok {
						t.Errorf("pass %d: %s (id %d) not read", pass, tm.name, id)
						continue
					}
					want := Map{ID: id, Type: info.Type, Name: info.Name, KeySize: info.KeySize, ValueSize: info.ValueSize,
						MaxEntries: info.MaxEntries, Flags: info.Flags, Memory: bpfmaps.Memlock(t, tm.m.FD()), MemoryKnown: true}
					gotShape := m
					gotShape.Entries = Entries{}
					if gotShape != want {
						t.Errorf("pass %d: %s:\n got %+v\nwant %+v", pass, tm.name, gotShape, want)
					}
					truth := tm.inserted
					if tm.lru {
						truth = keysNow(t, tm.m)
						if tm.inserted > int(info.MaxEntries) && truth >= tm.inserted {
							t.Errorf("pass %d: %s: LRU kept %d of %d inserted past %d", pass, tm.name, truth, tm.inserted, info.MaxEntries)
						}
					}
					e := m.Entries
					switch {
					case !HashFamily(m.Type):
						if e.Known || e.Reason != ReasonNotHash {
							t.Errorf("pass %d: %s: entries %+v for a type the kernel does not count", pass, tm.name, e)
						}
					case src.Iterator && !hasCount && tc.opts.CountBound == 0:
						if e.Known || e.Reason != ReasonNoKfunc {
							t.Errorf("pass %d: %s: entries %+v, want absent: %s", pass, tm.name, e, ReasonNoKfunc)
						}
					case src.Iterator && hasCount:
						if !e.Known || e.How != CountKfunc || e.Count != uint64(truth) {
							t.Errorf("pass %d: %s: entries %+v, want %d by kfunc", pass, tm.name, e, truth)
						}
						if d, ok := debug[id]; ok {
							debugCompared++
							if d != int64(e.Count) {
								t.Errorf("pass %d: %s: %d entries, maps.debug says %d", pass, tm.name, e.Count, d)
							}
						}
					case tc.opts.CountBound == 0:
						if e.Known || e.Reason == "" {
							t.Errorf("pass %d: %s: entries %+v, want absent with a reason", pass, tm.name, e)
						}
					case truth <= tc.opts.CountBound:
						if !e.Known || e.How != CountWalk || e.Count != uint64(truth) {
							t.Errorf("pass %d: %s: entries %+v, want %d by a key walk", pass, tm.name, e, truth)
						}
					default:
						if e.Known || e.Count != uint64(tc.opts.CountBound) || !strings.Contains(e.Reason, "at least") {
							t.Errorf("pass %d: %s: entries %+v, want at least %d, not known", pass, tm.name, e, tc.opts.CountBound)
						}
					}
					if f, ok := m.Fullness(); ok != e.Known || (ok && f != float64(e.Count)/float64(m.MaxEntries)) {
						t.Errorf("pass %d: %s: fullness %v, %v for entries %+v", pass, tm.name, f, ok, e)
					}
				}
			}
		})
	}
}
