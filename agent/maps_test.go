package agent

import (
	"context"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/mapstats"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

// TestScanMaps: a snapshot with Config.Maps has every map, a hash map's
// entries as inserted, its memory the kernel's fdinfo figure, and the
// program that uses it in ProgramIDs; the program's memory is its JIT
// image, instructions and memlock.
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
			if p.Memlock == nil || ProgramMemory(&p.Program) != uint64(p.JitedSize)+uint64(p.XlatedSize)+*p.Memlock || p.XlatedSize == 0 {
				t.Errorf("program memory %d from jited %d xlated %d memlock %v", ProgramMemory(&p.Program), p.JitedSize, p.XlatedSize, p.Memlock)
			}
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

func idsU32(ids []ebpf.MapID) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}
