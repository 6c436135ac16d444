package agent

import (
	"fmt"
	"slices"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/probes/mapstats"
)

// Map is one BPF map on the node as the latest scan read it
// (probes/mapstats), with the loaded programs that use it.
type Map struct {
	ID         uint32 `json:"id"`
	Name       string `json:"name"`
	Type       string `json:"type"` // as bpftool prints it: hash, array, ringbuf, ...
	KeySize    uint32 `json:"key_size"`
	ValueSize  uint32 `json:"value_size"`
	MaxEntries uint32 `json:"max_entries"`
	Flags      uint32 `json:"flags"`
	// MemoryBytes is the kernel's own figure for the map
	// (map->ops->map_mem_usage(), fdinfo "memlock:"); nil where it could
	// not be read (the map vanished before its fd was opened).
	MemoryBytes *uint64 `json:"memory_bytes"`
	// Entries is the element count, for the hash family only; nil with
	// EntriesReason saying why (not a hash map, a kernel without
	// bpf_map_sum_elem_count and no --map-count-bound).
	Entries       *uint64 `json:"entries"`
	EntriesMethod string  `json:"entries_method,omitempty"` // kfunc or walk
	EntriesReason string  `json:"entries_reason,omitempty"`
	// Fullness is Entries / MaxEntries; nil without Entries.
	Fullness *float64 `json:"fullness"`
	// ProgramIDs are the loaded programs whose map_ids name the map,
	// ascending; empty for a map only a pin or a process's fd keeps.
	ProgramIDs []uint32 `json:"program_ids"`
}

// MapScan says how the maps of a snapshot were read.
type MapScan struct {
	// Source is iterator (one read of iter/bpf_map, no fd but for the
	// memory of maps whose figure can change) or syscall (GET_NEXT_ID,
	// GET_FD_BY_ID, OBJ_GET_INFO_BY_FD per map); empty: maps not read.
	Source string `json:"source,omitempty"`
	// FallbackReason says why the iterator is not used.
	FallbackReason string `json:"fallback_reason,omitempty"`
	// Error is a failed read (the snapshot then has no maps).
	Error string `json:"error,omitempty"`
}

// mapReader reads the node's maps for Scan; nil when Config.Maps is off.
type mapReader struct {
	r *mapstats.Reader
	// err is why no reader could be made; reported in every snapshot.
	err error
}

func newMapReader(cfg *Config) *mapReader {
	r, err := mapstats.NewReader(mapstats.Options{CountBound: cfg.MapCountBound, NoIterator: cfg.NoIterator || cfg.ScanSource == ScanSourceSyscall})
	if err != nil {
		return &mapReader{err: fmt.Errorf("reading maps: %w", err)}
	}
	return &mapReader{r: r}
}

// read returns the node's maps joined with the programs that use them.
// The slice is new each scan: snapshots are never written after Scan.
func (m *mapReader) read(progs []*ProgramStat) ([]Map, MapScan) {
	if m.err != nil {
		return nil, MapScan{Error: m.err.Error()}
	}
	maps, src, err := m.r.Read()
	scan := MapScan{Source: ScanSourceSyscall, FallbackReason: src.Reason}
	if src.Iterator {
		scan = MapScan{Source: ScanSourceIterator}
	}
	if err != nil {
		scan.Error = err.Error()
		return nil, scan
	}
	out := make([]Map, len(maps))
	// The figures the maps point to, in three arrays for the scan rather
	// than three allocations per map (3,000 maps: 9,000 a scan).
	b := figures{mem: make([]uint64, len(maps)), entries: make([]uint64, len(maps)), full: make([]float64, len(maps))}
	for i := range maps {
		out[i] = fromMapstats(&maps[i], &b, i)
	}
	joinMapUsers(out, progs)
	return out, scan
}

// figures backs the pointer fields of one scan's maps.
type figures struct {
	mem, entries []uint64
	full         []float64
}

func (m *mapReader) close() {
	if m != nil && m.r != nil {
		m.r.Close()
	}
}

func fromMapstats(s *mapstats.Map, b *figures, i int) Map {
	m := Map{ID: s.ID, Name: s.Name, Type: reader.MapTypeName(uint32(s.Type)), KeySize: s.KeySize, ValueSize: s.ValueSize,
		MaxEntries: s.MaxEntries, Flags: s.Flags}
	if s.MemoryKnown {
		b.mem[i] = s.Memory
		m.MemoryBytes = &b.mem[i]
	}
	if s.Entries.Known {
		b.entries[i] = s.Entries.Count
		m.Entries = &b.entries[i]
		switch s.Entries.How {
		case mapstats.CountKfunc:
			m.EntriesMethod = "kfunc"
		case mapstats.CountWalk:
			m.EntriesMethod = "walk"
		}
		if f, ok := s.Fullness(); ok {
			b.full[i] = f
			m.Fullness = &b.full[i]
		}
	} else {
		m.EntriesReason = s.Entries.Reason
	}
	return m
}

// joinMapUsers fills each map's ProgramIDs from the programs' map_ids.
// maps is in ascending id order (the iterator's and the walk's).
func joinMapUsers(maps []Map, progs []*ProgramStat) {
	for _, p := range progs {
		for _, id := range p.MapIDs {
			i, ok := slices.BinarySearchFunc(maps, id, func(m Map, id uint32) int { return int(int64(m.ID) - int64(id)) })
			if ok {
				maps[i].ProgramIDs = append(maps[i].ProgramIDs, p.ID)
			}
		}
	}
	for i := range maps {
		slices.Sort(maps[i].ProgramIDs)
	}
}

// HashFamily says the kernel keeps an element count for maps of this
// type (the only ones with Entries where the kernel has the kfunc).
func (m *Map) HashFamily() bool {
	switch m.Type {
	case "hash", "percpu_hash", "lru_hash", "lru_percpu_hash", "hash_of_maps":
		return true
	}
	return false
}

// ProgramMemory is a program's own kernel memory: its JIT image, its
// translated instructions and what fdinfo's memlock charges it (maps not
// included: they are counted once, as maps).
func ProgramMemory(p *Program) uint64 {
	n := uint64(p.JitedSize) + uint64(p.XlatedSize)
	if p.Memlock != nil {
		n += *p.Memlock
	}
	return n
}

// MapMemory sums the memory of the maps named by ids, each counted once
// however often it is named: the rollup rule for a program, a workload, an
// owner or the node (exporter/METRICS.md, "Maps and memory").
func MapMemory(byID map[uint32]*Map, ids ...[]uint32) uint64 {
	var s MapSummer
	return s.Sum(byID, ids...)
}

// MapSummer is MapMemory for callers that sum many times a scan (the
// exporter, once per workload key): it keeps its set of ids seen between
// calls instead of making one each time.
type MapSummer struct{ seen map[uint32]struct{} }

// Sum is MapMemory.
func (s *MapSummer) Sum(byID map[uint32]*Map, ids ...[]uint32) uint64 {
	var n uint64
	add := func(id uint32) {
		if m := byID[id]; m != nil && m.MemoryBytes != nil {
			n += *m.MemoryBytes
		}
	}
	if len(ids) == 1 {
		// One program's map_ids: the kernel lists each map once.
		for _, id := range ids[0] {
			add(id)
		}
		return n
	}
	if s.seen == nil {
		s.seen = map[uint32]struct{}{}
	}
	clear(s.seen)
	for _, l := range ids {
		for _, id := range l {
			if _, dup := s.seen[id]; !dup {
				s.seen[id] = struct{}{}
				add(id)
			}
		}
	}
	return n
}
