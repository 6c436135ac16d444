package agent

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/mapstats"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

// TestScanMaps: a snapshot with Config.Maps has every map, a hash map's
// entries as inserted, its memory the kernel's fdinfo figure, and the
// program that uses it in ProgramIDs; the program's memory is what the
// kernel charges it: memlock and the JIT image.
func TestScanMaps(t *testing.T) {
	for _, src := range []string{ScanSourceIterator, ScanSourceSyscall} {
		t.Run(src, func(t *testing.T) {
			set := bpfmaps.New(t, "scan_maps", 6, 16)
			hash, arr, prog := set.Hash, set.Array, set.Prog
			pid := scantest.ProgID(t, prog)
			hid, aid := bpfmaps.MapID(t, hash), bpfmaps.MapID(t, arr)

			// The syscall walk has no element count of its own: the opt-in
			// bounded key walk gives it.
			bound := 0
			if src == ScanSourceSyscall {
				bound = 100
			}
			a, err := New(Config{Maps: true, ScanSource: src, MapCountBound: bound})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			s, err := a.Scan(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.MapScan.Error != "" || s.MapScan.Source != src {
				t.Fatalf("map scan %+v, want source %s", s.MapScan, src)
			}
			byID := map[uint32]*Map{}
			for _, m := range s.Maps {
				byID[m.ID] = m
			}
			h, ar := byID[hid], byID[aid]
			if h == nil || ar == nil {
				t.Fatalf("maps %d, %d missing from %d maps", hid, aid, len(s.Maps))
			}
			if h.Type != "hash" || h.Name != "scan_maps_h" || h.KeySize != 4 || h.ValueSize != 8 || h.MaxEntries != 16 {
				t.Errorf("hash map %+v", h)
			}
			if src == ScanSourceIterator && h.EntriesReason == mapstats.ReasonNoKfunc {
				t.Skipf("the kernel has no element count: %s", h.EntriesReason)
			}
			if h.Entries == nil || *h.Entries != 6 || h.Fullness == nil || *h.Fullness != 6.0/16 {
				t.Errorf("hash map entries %v fullness %v (%s), want 6 and 0.375", h.Entries, h.Fullness, h.EntriesReason)
			}
			if want := map[string]string{ScanSourceIterator: "kfunc", ScanSourceSyscall: "walk"}[src]; h.EntriesMethod != want {
				t.Errorf("hash map entries counted by %q, want %q", h.EntriesMethod, want)
			}
			if ar.Type != "array" || ar.Entries != nil || ar.EntriesReason == "" {
				t.Errorf("array map %+v: want no entries, with a reason", ar)
			}
			for _, c := range []struct {
				m   *Map
				own *ebpf.Map
			}{{h, hash}, {ar, arr}} {
				if want := bpfmaps.Memlock(t, c.own.FD()); c.m.MemoryBytes == nil || *c.m.MemoryBytes != want {
					t.Errorf("map %s memory %v, want fdinfo's %d", c.m.Name, c.m.MemoryBytes, want)
				}
				if !slices.Contains(c.m.ProgramIDs, pid) {
					t.Errorf("map %s users %v, want program %d among them", c.m.Name, c.m.ProgramIDs, pid)
				}
			}
			var p *ProgramStat
			for _, x := range s.Programs {
				if x.ID == pid {
					p = x
				}
			}
			if p == nil {
				t.Fatalf("program %d not in the snapshot", pid)
			}
			info, err := prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			checkProgramMemory(t, p, prog, info)
			if ids, _ := info.MapIDs(); !slices.Equal(slices.Sorted(slices.Values(idsU32(ids))), slices.Sorted(slices.Values(p.MapIDs))) {
				t.Errorf("program map ids %v, kernel says %v", p.MapIDs, ids)
			}
			byIDm := map[uint32]*Map{hid: h, aid: ar}
			if got, want := MapMemory(byIDm, p.MapIDs, p.MapIDs), *h.MemoryBytes+*ar.MemoryBytes; got != want {
				t.Errorf("MapMemory counts a map named twice twice: %d, want %d", got, want)
			}
		})
	}
}

// checkProgramMemory checks a scanned program's memory against an
// independent count: the kernel's memlock read from this process's own
// fdinfo of the program and the JIT size from its own BPF_OBJ_GET_INFO.
// memlock (prog->pages * PAGE_SIZE) already holds the translated
// instructions, so the formula that added xlated_size to it fails here.
func checkProgramMemory(t *testing.T, p *ProgramStat, prog *ebpf.Program, info *ebpf.ProgramInfo) {
	t.Helper()
	memlock := bpfmaps.Memlock(t, prog.FD())
	xlated, err := info.TranslatedSize()
	if err != nil {
		t.Fatal(err)
	}
	jited, _ := info.JitedSize() // 0 where the JIT is off
	page := uint64(os.Getpagesize())
	// The premise: memlock is whole pages and covers the instructions.
	if memlock == 0 || memlock%page != 0 || memlock < uint64(xlated) || xlated == 0 {
		t.Fatalf("fdinfo memlock %d (page %d), xlated %d: not whole pages holding the instructions", memlock, page, xlated)
	}
	if p.Memlock == nil || *p.Memlock != memlock {
		t.Errorf("scanned memlock %v, fdinfo says %d", p.Memlock, memlock)
	}
	if got, want := ProgramMemory(&p.Program), memlock+uint64(jited); got != want {
		t.Errorf("program memory %d, want the kernel's charge %d (memlock %d + JIT image %d; xlated %d is inside memlock)", got, want, memlock, jited, xlated)
	}
}

func idsU32(ids []ebpf.MapID) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// TestMapInterval: with Config.MapInterval, scans within the interval
// carry the last read's maps (the same slice, its time) though a hash map
// gained elements; a scan that finds a program loaded reads them at once,
// and so does the first scan past the interval.
func TestMapInterval(t *testing.T) {
	set := bpfmaps.New(t, "map_every", 2, 16)
	hid := bpfmaps.MapID(t, set.Hash)
	clock := time.Now()
	a, err := New(Config{Maps: true, MapInterval: time.Minute, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	hash := func(s *Snapshot) *Map {
		t.Helper()
		if s.MapScan.Error != "" {
			t.Fatalf("map scan: %s", s.MapScan.Error)
		}
		i, ok := slices.BinarySearchFunc(s.Maps, hid, func(m *Map, id uint32) int { return int(int64(m.ID) - int64(id)) })
		if !ok {
			t.Fatalf("hash map %d missing from %d maps", hid, len(s.Maps))
		}
		return s.Maps[i]
	}
	// Where the kernel has no element count (before 6.6) only the read
	// times say which scans read the maps.
	counts := true
	entries := func(m *Map) uint64 {
		if m.Entries == nil {
			counts = false
			t.Logf("no element count: %s", m.EntriesReason)
			return 0
		}
		return *m.Entries
	}
	put := func(k uint32) {
		t.Helper()
		if err := set.Hash.Put(k, uint64(k)); err != nil {
			t.Fatal(err)
		}
	}

	first := scan(t, a)
	if !first.MapScan.ReadAt.Equal(clock) || counts && entries(hash(first)) != 2 {
		t.Fatalf("first scan: read at %v (scan at %v), entries %v; want a read now, 2 entries", first.MapScan.ReadAt, clock, hash(first).Entries)
	}
	put(2)
	// A program loaded or unloaded between two scans makes the second read
	// the maps as well: compare two scans that saw the same programs.
	sameProgs := func(a, b *Snapshot) bool {
		return slices.EqualFunc(a.Programs, b.Programs, func(p, q *ProgramStat) bool { return p.ID == q.ID })
	}
	prev, within := first, (*Snapshot)(nil)
	for try := range 20 {
		if try > 0 {
			// The agent's own link iterator, loaded by its first scan
			// after the programs were read, is one.
			t.Logf("scan %d: programs came or went (%d, then %d): that scan read the maps", try, len(first.Programs), len(prev.Programs))
		}
		clock = clock.Add(time.Second)
		if s := scan(t, a); sameProgs(prev, s) {
			within = s
			break
		} else {
			prev = s
		}
	}
	if within == nil {
		t.Fatal("programs came or went on the node between every two of 20 scans")
	}
	if !within.MapScan.ReadAt.Equal(prev.MapScan.ReadAt) || &within.Maps[0] != &prev.Maps[0] || counts && entries(hash(within)) != entries(hash(prev)) {
		t.Errorf("within the interval, no program loaded: read at %v, entries %v; want the last read's maps (at %v, entries %v)", within.MapScan.ReadAt, hash(within).Entries, prev.MapScan.ReadAt, hash(prev).Entries)
	}
	if prev == first && counts && entries(hash(within)) != 2 {
		t.Errorf("within the interval: entries %d, want the first read's 2", entries(hash(within)))
	}
	scantest.LoadPrograms(t, 1)
	clock = clock.Add(10 * time.Second)
	loaded := scan(t, a)
	if !loaded.MapScan.ReadAt.Equal(clock) || counts && entries(hash(loaded)) != 3 {
		t.Errorf("after a program was loaded: read at %v (scan at %v), entries %v; want a read now, 3 entries", loaded.MapScan.ReadAt, clock, hash(loaded).Entries)
	}
	put(3)
	clock = clock.Add(time.Minute)
	past := scan(t, a)
	if !past.MapScan.ReadAt.Equal(clock) || counts && entries(hash(past)) != 4 {
		t.Errorf("past the interval: read at %v (scan at %v), entries %v; want a read now, 4 entries", past.MapScan.ReadAt, clock, hash(past).Entries)
	}
}
