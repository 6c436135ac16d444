package agent

import (
	"fmt"
	"slices"
	"time"
	"unsafe"

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
	// Evictions is how many entries an LRU hash map (lru_hash,
	// lru_percpu_hash) evicted, counted by the agent's probe since it was
	// attached (MapScan.PressureSince); nil for other types and where the
	// probe is absent (MapScan.EvictionsReason). EvictionsPerSecond is its
	// rate between the last two map reads (nil at a map's first).
	Evictions          *uint64  `json:"evictions"`
	EvictionsPerSecond *float64 `json:"evictions_per_second"`
	// RefusedUpdates is how many updates of a hash-family map the kernel
	// refused because it was full (E2BIG) or out of memory (ENOMEM), from
	// programs and syscalls, since the probe was attached; nil for other
	// types and without the probe (MapScan.RefusedReason).
	RefusedUpdates          *uint64  `json:"refused_updates"`
	RefusedUpdatesPerSecond *float64 `json:"refused_updates_per_second"`
	// PressureSinceStart says the map may be older than the agent's
	// probes, so its counts are those since they were attached, not since
	// the map was made: the kernel keeps no count of its own.
	PressureSinceStart bool `json:"pressure_since_agent_start,omitempty"`
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
	// ReadAt is when the maps were read: an earlier scan's time where
	// the agent reads them every Config.MapInterval.
	ReadAt time.Time `json:"read_at"`
	// PressureSince is when the agent's eviction and refused-update
	// counters were attached (Evictions and RefusedUpdates count from
	// then); EvictionsReason and RefusedReason say why one is absent (the
	// kernel refused it, or the flag is off).
	PressureSince   time.Time `json:"pressure_since,omitzero"`
	EvictionsReason string    `json:"evictions_reason,omitempty"`
	RefusedReason   string    `json:"refused_reason,omitempty"`
}

// mapReader reads the node's maps for Scan; nil when Config.Maps is off.
type mapReader struct {
	r *mapstats.Reader
	// err is why no reader could be made; reported in every snapshot.
	err error
	// interval is Config.MapInterval; scan is the last read's.
	interval time.Duration
	scan     MapScan
	// prev is the last snapshot's maps, ascending by id. A map that did
	// not move keeps its entry from scan to scan, as a program does
	// (snapshots are never written): most scans allocate no Map, and the
	// exporter tells an unchanged map by its pointer.
	prev []*Map
	// users are the programs using each map, by map id (each slice
	// sorted, never written once made), built from usersOf: the programs'
	// map_ids, which the kernel fixes at load. They are joined again only
	// when a program came, went or was read anew.
	users   map[uint32][]uint32
	usersOf []progMaps
	// pressure counts LRU evictions and refused updates
	// (Config.MapPressure); nil without.
	pressure *pressure
}

// progMaps is one program's map_ids as the join last saw them: the slice
// itself, which the reader keeps while it keeps the program.
type progMaps struct {
	id  uint32
	ids *uint32
	n   int
}

func newMapReader(cfg *Config) *mapReader {
	r, err := mapstats.NewReader(mapstats.Options{CountBound: cfg.MapCountBound, NoIterator: cfg.NoIterator || cfg.ScanSource == ScanSourceSyscall, CacheDir: cfg.CacheDir})
	if err != nil {
		return &mapReader{err: fmt.Errorf("reading maps: %w", err)}
	}
	m := &mapReader{r: r, interval: cfg.MapInterval}
	if cfg.MapPressure {
		m.pressure = newPressure(cfg.MapRefusals)
	}
	return m
}

// read returns the node's maps joined with the programs that use them, as
// read now or, within the interval and with the same programs, at the
// last read (the same slice). A new slice's entries are the last read's
// where the map did not move.
func (m *mapReader) read(progs []*ProgramStat, now time.Time) ([]*Map, MapScan) {
	if m.err != nil {
		return nil, MapScan{Error: m.err.Error()}
	}
	if m.prev != nil && now.Sub(m.scan.ReadAt) < m.interval && m.joinedFrom(progs) {
		return m.prev, m.scan
	}
	maps, src, err := m.r.Read()
	dt := now.Sub(m.scan.ReadAt)
	m.scan = MapScan{Source: ScanSourceSyscall, FallbackReason: src.Reason, ReadAt: now}
	if src.Iterator {
		m.scan = MapScan{Source: ScanSourceIterator, ReadAt: now}
	}
	if err != nil {
		m.scan.Error = err.Error()
		m.prev = nil
		return nil, m.scan
	}
	m.pressure.scan(&m.scan)
	if err := m.pressure.read(maps); err != nil {
		m.scan.EvictionsReason, m.scan.RefusedReason = err.Error(), err.Error()
	}
	return m.build(maps, progs, dt), m.scan
}

// build makes a snapshot's maps from the reader's, joined with progs.
func (m *mapReader) build(maps []mapstats.Map, progs []*ProgramStat, dt time.Duration) []*Map {
	joined := m.join(progs)
	out := make([]*Map, len(maps))
	j := 0 // prev's first map whose id is not below maps[i]'s
	for i := range maps {
		s := &maps[i]
		for j < len(m.prev) && m.prev[j].ID < s.ID {
			j++
		}
		have := j < len(m.prev) && m.prev[j].ID == s.ID
		var users []uint32
		if have && !joined {
			users = m.prev[j].ProgramIDs // the join's, unchanged
		} else {
			users = m.users[s.ID]
		}
		var prev *Map
		if have {
			prev = m.prev[j]
		}
		ev := m.pressure.of(s.ID, reader.MapTypeName(uint32(s.Type)), prev, dt)
		if have && sameMap(prev, s, users) && ev.same(prev) {
			out[i] = prev
			continue
		}
		out[i] = newMap(s, users, ev)
	}
	m.prev = out
	return out
}

// joinedFrom says users were built from progs' map_ids: no program came
// or went, none was read anew.
func (m *mapReader) joinedFrom(progs []*ProgramStat) bool {
	if m.users == nil || len(progs) != len(m.usersOf) {
		return false
	}
	for i, p := range progs {
		if m.usersOf[i] != (progMaps{p.ID, unsafe.SliceData(p.MapIDs), len(p.MapIDs)}) {
			return false
		}
	}
	return true
}

// join rebuilds users when they were not built from progs, and says
// whether it did.
func (m *mapReader) join(progs []*ProgramStat) bool {
	if m.joinedFrom(progs) {
		return false
	}
	m.usersOf = m.usersOf[:0]
	users := make(map[uint32][]uint32, len(m.users))
	for _, p := range progs {
		m.usersOf = append(m.usersOf, progMaps{p.ID, unsafe.SliceData(p.MapIDs), len(p.MapIDs)})
		for _, id := range p.MapIDs {
			users[id] = append(users[id], p.ID)
		}
	}
	// An unchanged list keeps its old slice, so that sameMap (which
	// compares slices by identity) keeps the map's entry; a new one is
	// clipped: snapshots share it, and an append must not write into it.
	for id, ids := range users {
		slices.Sort(ids)
		if old := m.users[id]; slices.Equal(old, ids) {
			users[id] = old
		} else {
			users[id] = slices.Clip(ids)
		}
	}
	m.users = users
	return true
}

// sameMap says e, a snapshot entry, still describes s used by users.
func sameMap(e *Map, s *mapstats.Map, users []uint32) bool {
	if e.Name != s.Name || e.Type != reader.MapTypeName(uint32(s.Type)) || e.KeySize != s.KeySize ||
		e.ValueSize != s.ValueSize || e.MaxEntries != s.MaxEntries || e.Flags != s.Flags ||
		len(e.ProgramIDs) != len(users) || len(users) > 0 && &e.ProgramIDs[0] != &users[0] {
		return false
	}
	if (e.MemoryBytes != nil) != s.MemoryKnown || s.MemoryKnown && *e.MemoryBytes != s.Memory {
		return false
	}
	if (e.Entries != nil) != s.Entries.Known {
		return false
	}
	if !s.Entries.Known {
		return e.EntriesReason == s.Entries.Reason
	}
	return *e.Entries == s.Entries.Count && e.EntriesMethod == countMethod(s.Entries.How)
}

// mapEntry is a Map with the figures its pointers point to: one
// allocation per new or changed map.
type mapEntry struct {
	Map
	mem, entries, evicted, refused uint64
	full, evictRate, refuseRate    float64
}

func newMap(s *mapstats.Map, users []uint32, mp mapPressure) *Map {
	e := &mapEntry{Map: Map{ID: s.ID, Name: s.Name, Type: reader.MapTypeName(uint32(s.Type)), KeySize: s.KeySize,
		ValueSize: s.ValueSize, MaxEntries: s.MaxEntries, Flags: s.Flags, ProgramIDs: users}}
	m := &e.Map
	m.PressureSinceStart = mp.sinceStart
	if c := mp.evicted; c.known {
		e.evicted, m.Evictions = c.n, &e.evicted
		if c.rateKnown {
			e.evictRate, m.EvictionsPerSecond = c.rate, &e.evictRate
		}
	}
	if c := mp.refused; c.known {
		e.refused, m.RefusedUpdates = c.n, &e.refused
		if c.rateKnown {
			e.refuseRate, m.RefusedUpdatesPerSecond = c.rate, &e.refuseRate
		}
	}
	if s.MemoryKnown {
		e.mem = s.Memory
		m.MemoryBytes = &e.mem
	}
	if !s.Entries.Known {
		m.EntriesReason = s.Entries.Reason
		return m
	}
	e.entries = s.Entries.Count
	m.Entries, m.EntriesMethod = &e.entries, countMethod(s.Entries.How)
	if f, ok := s.Fullness(); ok {
		e.full = f
		m.Fullness = &e.full
	}
	return m
}

func countMethod(h mapstats.CountMethod) string {
	switch h {
	case mapstats.CountKfunc:
		return "kfunc"
	case mapstats.CountWalk:
		return "walk"
	}
	return ""
}

func (m *mapReader) close() {
	if m != nil && m.r != nil {
		m.r.Close()
		m.pressure.close()
	}
}

// HashFamily says the kernel keeps an element count for maps of this
// type (the only ones with Entries where the kernel has the kfunc).
func (m *Map) HashFamily() bool { return hashFamily(m.Type) }

func hashFamily(typ string) bool {
	switch typ {
	case "hash", "percpu_hash", "lru_hash", "lru_percpu_hash", "hash_of_maps":
		return true
	}
	return false
}

// ProgramMemory is a program's own kernel memory, as the kernel charges
// it: fdinfo's memlock (prog->pages * PAGE_SIZE: the whole struct bpf_prog,
// its translated instructions insnsi included, page-rounded) and the JIT
// image, which is allocated apart (bpf_jit_binary_alloc, charged to
// bpf_jit_limit, not in prog->pages). The translated instructions are not
// added again: they are inside memlock. Without a memlock (fdinfo
// unreadable) the JIT image and the instructions are the floor the kernel
// reports. Maps are not included: they are counted once, as maps.
func ProgramMemory(p *Program) uint64 {
	if p.Memlock == nil {
		return uint64(p.JitedSize) + uint64(p.XlatedSize)
	}
	return uint64(p.JitedSize) + *p.Memlock
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
