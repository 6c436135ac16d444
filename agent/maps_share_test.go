package agent

import (
	"fmt"
	"slices"
	"testing"

	"github.com/bpfleet/bpfleet/probes/mapstats"
	"github.com/cilium/ebpf"
)

func statMap(id uint32, typ ebpf.MapType, count uint64, mem uint64) mapstats.Map {
	m := mapstats.Map{ID: id, Type: typ, Name: fmt.Sprintf("m%d", id), KeySize: 4, ValueSize: 8, MaxEntries: 64, Memory: mem, MemoryKnown: true}
	if mapstats.HashFamily(typ) {
		m.Entries = mapstats.Entries{Count: count, Known: true, How: mapstats.CountKfunc}
	} else {
		m.Entries.Reason = mapstats.ReasonNotHash
	}
	return m
}

func usingProg(id uint32, maps ...uint32) *ProgramStat {
	return &ProgramStat{Program: Program{ID: id, MapIDs: maps}}
}

// TestMapEntriesShared: a map that did not move keeps its snapshot entry
// from scan to scan (the exporter tells unchanged maps by it); one whose
// count, memory or users changed gets a new entry with the new figures,
// and its neighbours keep theirs.
func TestMapEntriesShared(t *testing.T) {
	p1, p2 := usingProg(1, 10, 11), usingProg(2, 11)
	base := []mapstats.Map{statMap(10, ebpf.Hash, 3, 1000), statMap(11, ebpf.Array, 0, 500), statMap(12, ebpf.Hash, 0, 800)}
	type scan struct {
		what  string
		maps  func([]mapstats.Map) []mapstats.Map
		progs []*ProgramStat
		// moved are the maps with new entries; users each map's programs.
		moved []uint32
		users map[uint32][]uint32
	}
	same := func(m []mapstats.Map) []mapstats.Map { return m }
	scans := []scan{
		{what: "first", maps: same, progs: []*ProgramStat{p1, p2}, moved: []uint32{10, 11, 12},
			users: map[uint32][]uint32{10: {1}, 11: {1, 2}}},
		{what: "nothing moved", maps: same, progs: []*ProgramStat{p1, p2}},
		{what: "new program entries, same map_ids", maps: same, progs: []*ProgramStat{usingProg(1, p1.MapIDs...), p2}, moved: []uint32{}},
		{what: "count", maps: func(m []mapstats.Map) []mapstats.Map { m[0].Entries.Count = 4; return m }, progs: []*ProgramStat{p1, p2}, moved: []uint32{10}},
		{what: "memory", maps: func(m []mapstats.Map) []mapstats.Map { m[2].Memory = 900; return m }, progs: []*ProgramStat{p1, p2}, moved: []uint32{12}},
		{what: "a program unloaded", maps: same, progs: []*ProgramStat{p1}, moved: []uint32{11},
			users: map[uint32][]uint32{10: {1}, 11: {1}}},
		{what: "a program loaded", maps: same, progs: []*ProgramStat{p1, usingProg(3, 12)}, moved: []uint32{12},
			users: map[uint32][]uint32{10: {1}, 11: {1}, 12: {3}}},
		{what: "a map freed, one created", maps: func(m []mapstats.Map) []mapstats.Map {
			return append(m[1:], statMap(13, ebpf.LRUHash, 7, 2000))
		}, progs: []*ProgramStat{p1}, moved: []uint32{12, 13}, users: map[uint32][]uint32{11: {1}}},
	}
	var r mapReader
	var prev map[uint32]*Map
	stat := slices.Clone(base)
	for _, sc := range scans {
		stat = sc.maps(slices.Clone(stat))
		got := r.build(stat, sc.progs, 0)
		if len(got) != len(stat) {
			t.Fatalf("%s: %d maps, want %d", sc.what, len(got), len(stat))
		}
		now := map[uint32]*Map{}
		for i, m := range got {
			s := &stat[i]
			now[m.ID] = m
			if m.ID != s.ID || *m.MemoryBytes != s.Memory || (m.Entries != nil) != s.Entries.Known || m.Entries != nil && *m.Entries != s.Entries.Count {
				t.Errorf("%s: map %d: %+v, read %+v", sc.what, s.ID, m, s)
			}
			if m.Fullness != nil && *m.Fullness != float64(*m.Entries)/64 {
				t.Errorf("%s: map %d: fullness %v", sc.what, s.ID, *m.Fullness)
			}
			moved := prev[m.ID] != m
			if want := slices.Contains(sc.moved, m.ID); moved != want {
				t.Errorf("%s: map %d: new entry %v, want %v", sc.what, m.ID, moved, want)
			}
			if sc.users != nil && !slices.Equal(m.ProgramIDs, sc.users[m.ID]) {
				t.Errorf("%s: map %d: users %v, want %v", sc.what, m.ID, m.ProgramIDs, sc.users[m.ID])
			}
		}
		// Entries handed out before are never written.
		for id, m := range prev {
			if old := now[id]; old != nil && old != m && old.Entries != nil && m.Entries != nil && old.Entries == m.Entries {
				t.Errorf("%s: map %d: old and new entries share their count", sc.what, id)
			}
		}
		prev = now
	}
}

// BenchmarkMapBuild is the agent's per-scan work on the maps after the
// reader (mapReader.build: the join with the programs, the entries) at
// 1,000 programs and 3,000 maps. steady: nothing moved (the usual scan);
// moving: 100 hash maps changed their count.
func BenchmarkMapBuild(b *testing.B) {
	for _, moving := range []int{0, 100} {
		b.Run(map[bool]string{true: "moving", false: "steady"}[moving > 0], func(b *testing.B) {
			stat := make([]mapstats.Map, 3000)
			for i := range stat {
				stat[i] = statMap(uint32(i+1), []ebpf.MapType{ebpf.Array, ebpf.Hash}[i%2], uint64(i%16), 4096)
			}
			progs := make([]*ProgramStat, 1000)
			for i := range progs {
				progs[i] = usingProg(uint32(5000+i), uint32(3*i+1), uint32(3*i+2))
			}
			var r mapReader
			r.build(stat, progs, 0)
			b.ReportAllocs()
			for n := 0; b.Loop(); n++ {
				for k := range moving {
					stat[(2*(n*moving+k)+1)%len(stat)].Entries.Count++
				}
				r.build(stat, progs, 0)
			}
		})
	}
}
