package exporter

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// Values of bpf.memory.kind: a program's own memory (its memlock charge,
// translated instructions included, and its JIT image) or the maps'.
const (
	memoryProgram = "program"
	memoryMap     = "map"
)

var (
	kindProgram     = attribute.String(attrMemoryKind, memoryProgram)
	kindMap         = attribute.String(attrMemoryKind, memoryMap)
	nodeProgramsSet = attribute.NewSet(kindProgram)
	nodeMapsSet     = attribute.NewSet(kindMap)
)

// ownerGroup is the part of a workload key that says who owns a program
// by workload, not by instance: a map's workload series are keyed by the
// groups of the programs that use it.
type ownerGroup struct {
	namespace, kind, workload, exe string
}

func groupOf(p *agent.Program) ownerGroup {
	o := primaryOwner(p)
	g := ownerGroup{namespace: o.PodNamespace, exe: exeName(o.Comm, o.Exe)}
	// A pod without a controller (a bare pod, a static pod) is its own
	// workload: its name is as stable as it gets.
	g.kind, g.workload = o.Workload()
	return g
}

func (g ownerGroup) kvs(kv []attribute.KeyValue) []attribute.KeyValue {
	add := func(name, v string) {
		if v != "" {
			kv = append(kv, attribute.String(name, v))
		}
	}
	add(attrK8sNamespaceName, g.namespace)
	add(attrK8sWorkloadKind, g.kind)
	add(attrK8sWorkloadName, g.workload)
	add(attrProcessExecutableName, g.exe)
	return kv
}

// mapKey is one map series: at the program level one map (its id) for one
// owner group of the programs that use it; at the workload level (id 0)
// every map of one name (less a suffix made per instance) and type used by
// programs of one group. A map with no program, or only programs no
// process owns, has the empty group.
type mapKey struct {
	id        uint32
	name, typ string
	g         ownerGroup
}

// mapSeries is a key's values: memory, entries and max entries summed over
// its maps (each once), fullness the highest of them.
type mapSeries struct {
	attrs                     attribute.Set
	memory, entries, capacity uint64
	hasMemory, hasEntries     bool
	fullness                  float64
	hasFullness               bool
	// evictions: the LRU maps' evictions since the probe was attached,
	// summed; hasEvictions where one of the key's maps is counted.
	evictions    uint64
	hasEvictions bool
	// refused: the hash-family maps' refused updates, the same way.
	refused    uint64
	hasRefused bool
}

// addKnown adds v to sum where the kernel gave it (v not nil), noting in
// known that one of the sum's maps had it.
func addKnown(sum *uint64, known *bool, v *uint64) {
	if v != nil {
		*sum += *v
		*known = true
	}
}

func (ms *mapSeries) add(m *agent.Map) {
	ms.capacity += uint64(m.MaxEntries)
	addKnown(&ms.memory, &ms.hasMemory, m.MemoryBytes)
	addKnown(&ms.entries, &ms.hasEntries, m.Entries)
	addKnown(&ms.evictions, &ms.hasEvictions, m.Evictions)
	addKnown(&ms.refused, &ms.hasRefused, m.RefusedUpdates)
	if m.Fullness != nil && (!ms.hasFullness || *m.Fullness > ms.fullness) {
		ms.fullness = *m.Fullness
		ms.hasFullness = true
	}
}

// valueSeries is one gauge value with its attributes.
type valueSeries struct {
	attrs attribute.Set
	v     uint64
}

// nodeMemory is the node's totals, each map and program once.
type nodeMemory struct {
	programs uint64
	// mapsRead: the scan read the maps (Config.Maps, no error); without
	// it no map figure is exported rather than a false zero.
	mapsRead bool
	maps     uint64
	count    int
	source   attribute.Set
	// evictionsSince is when the eviction counter was attached: the
	// start of the bpf.map.evictions counters.
	evictionsSince time.Time
}

// mapState is what the exporter keeps of the maps between scans. The
// agent hands out the same entry for a map that did not move, so most
// scans find every map as it was and redo nothing here.
type mapState struct {
	// prev is the last snapshot's maps (never written) and byID the same
	// by id, kept up to date rather than made anew each scan.
	prev []*agent.Map
	byID map[uint32]*agent.Map
	// keys, groups and gen are buildMaps': the series keys seen in the
	// last scan, each program's owner group, and the scan count.
	keys   map[mapKey]*mapKeyState
	groups map[uint32]*programGroup
	gen    uint64
	// refs are the keys of each map of keyed, the maps buildMaps last
	// keyed: those of keyed[i] are refs[refAt[i]:refAt[i+1]]. A map whose
	// entry is unchanged, with no program's group moved, keeps them.
	keyed        []*agent.Map
	refs, refs2  []*mapKeyState
	refAt, refA2 []int32
	// sum sums map memory without a set per call.
	sum agent.MapSummer
}

// mapsSeen says how a snapshot's maps compare with the last one's.
type mapsSeen struct {
	// same: every map is the last snapshot's entry; memory: the same
	// maps with the same memory (entries may differ).
	same, memory bool
}

// index fills v.node and the maps by id, and says what moved since the
// last snapshot. byID is nil when the maps were not read.
func (st *mapState) index(s *agent.Snapshot, v *view) (byID map[uint32]*agent.Map, seen mapsSeen) {
	for _, p := range s.Programs {
		v.node.programs += agent.ProgramMemory(&p.Program)
	}
	if s.MapScan.Source == "" || s.MapScan.Error != "" {
		st.prev, st.byID = nil, nil
		return nil, seen
	}
	ids := st.byID != nil && len(s.Maps) == len(st.prev) // the same ids
	seen = mapsSeen{same: ids, memory: ids}
	for i, m := range s.Maps {
		if m.MemoryBytes != nil {
			v.node.maps += *m.MemoryBytes
		}
		if !ids || st.prev[i] == m {
			continue
		}
		seen.same = false
		if ids = st.prev[i].ID == m.ID; ids {
			seen.memory = seen.memory && equalPtr(st.prev[i].MemoryBytes, m.MemoryBytes)
		}
	}
	seen.memory = seen.memory && ids
	switch {
	case seen.same:
	case ids: // only entries changed
		for i, m := range s.Maps {
			if st.prev[i] != m {
				st.byID[m.ID] = m
			}
		}
	default:
		if st.byID == nil {
			st.byID = make(map[uint32]*agent.Map, len(s.Maps))
		}
		clear(st.byID)
		for _, m := range s.Maps {
			st.byID[m.ID] = m
		}
	}
	st.prev = s.Maps
	v.node.mapsRead, v.node.count, v.node.evictionsSince = true, len(s.Maps), s.MapScan.PressureSince
	v.node.source = attribute.NewSet(attribute.String(attrScanSource, s.MapScan.Source),
		attribute.String(attrScanFallbackReason, s.MapScan.FallbackReason))
	return st.byID, seen
}

// memorySets are a series' attributes with each bpf.memory.kind.
func memorySets(kv []attribute.KeyValue) (prog, maps attribute.Set) {
	with := func(k attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append(append(make([]attribute.KeyValue, 0, len(kv)+1), kv...), k)...)
	}
	return with(kindProgram), with(kindMap)
}

// memorySeriesPer is how many memory series a program, key or owner has:
// its own memory, and its maps' when they were read.
func memorySeriesPer(v *view) int {
	if v.node.mapsRead {
		return 2
	}
	return 1
}

// addMemory appends a series' program and map memory to v.memory; the map
// figure only when the maps were read.
func addMemory(v *view, progSet, mapSet attribute.Set, prog, maps uint64) {
	v.memory = append(v.memory, valueSeries{progSet, prog})
	if v.node.mapsRead {
		v.memory = append(v.memory, valueSeries{mapSet, maps})
	}
}

// programMemory adds one exported program's memory and verified
// instructions (program level). The sets with the memory kinds are cached
// with the program's own (cachedAttrs), made once per program and owner.
func (e *Exporter) programMemory(v *view, c cachedAttrs, p *agent.Program, byID map[uint32]*agent.Map) {
	if c.memSets[0].Len() == 0 {
		c.memSets[0], c.memSets[1] = memorySets(c.attrs)
		e.progCache[p.ID] = c
	}
	var maps uint64
	if v.node.mapsRead {
		maps = e.maps.sum.Sum(byID, p.MapIDs)
	}
	addMemory(v, c.memSets[0], c.memSets[1], agent.ProgramMemory(p), maps)
	if p.VerifiedInsns != nil {
		v.insns = append(v.insns, valueSeries{c.set, uint64(*p.VerifiedInsns)})
	}
}

// keyMemory is what a workload key's loaded programs hold, summed by
// buildWorkloads as it meets them: their own memory, the map ids they use
// (each list the kernel's, without repeats), the most verified
// instructions among them.
type keyMemory struct {
	prog     uint64
	mapIDs   [][]uint32
	insns    uint32
	hasInsns bool
}

func (k *keyMemory) add(p *agent.Program) {
	k.prog += agent.ProgramMemory(p)
	if len(p.MapIDs) > 0 {
		k.mapIDs = append(k.mapIDs, p.MapIDs)
	}
	if p.VerifiedInsns != nil && (!k.hasInsns || *p.VerifiedInsns > k.insns) {
		k.insns, k.hasInsns = *p.VerifiedInsns, true
	}
}

// workloadMemory adds each exported workload key's memory: its loaded
// programs' own, and the maps they use, each once per key; verified
// instructions the most of any of its programs. Called after
// buildWorkloads, which summed each key's keyMemory.
func (e *Exporter) workloadMemory(v *view, byID map[uint32]*agent.Map, seen mapsSeen, prev *view) {
	// Most scans change nothing the figures come from: no program loaded,
	// unloaded or moved to another key, and every map's memory as before.
	// The last view's series are then this one's (views are never
	// written), which spares a slice of two series per key every scan.
	mapsSame := (byID == nil || seen.memory) && (byID != nil) == (prev != nil && prev.node.mapsRead)
	if prev != nil && !e.keysMoved && mapsSame && len(prev.workloads) == len(v.workloads) {
		v.memory, v.insns = prev.memory, prev.insns
		return
	}
	v.memory = make([]valueSeries, 0, memorySeriesPer(v)*len(v.workloads))
	for _, w := range v.workloads {
		if w.loaded == 0 {
			continue // in its grace period: no program, no memory
		}
		if w.memSets[0].Len() == 0 {
			w.memSets[0], w.memSets[1] = memorySets(w.kv)
		}
		var maps uint64
		if v.node.mapsRead {
			maps = e.maps.sum.Sum(byID, w.mem.mapIDs...)
		}
		addMemory(v, w.memSets[0], w.memSets[1], w.mem.prog, maps)
		if w.mem.hasInsns {
			v.insns = append(v.insns, valueSeries{w.attrs, uint64(w.mem.insns)})
		}
	}
}

// ownerMemory adds each owner's memory: its programs' own, and the maps
// they use, each once per owner. Called after the owner aggregates are
// updated: their attribute sets are the owners'.
func (e *Exporter) ownerMemory(s *agent.Snapshot, v *view, byID map[uint32]*agent.Map) {
	progs := make(map[uint32]*agent.Program, len(s.Programs))
	for _, p := range s.Programs {
		progs[p.ID] = &p.Program
	}
	for i := range s.Owners {
		o := &s.Owners[i]
		a := e.owners[o.Key]
		if a == nil {
			continue
		}
		var own uint64
		mapIDs := make([][]uint32, 0, len(o.ProgramIDs))
		for _, id := range o.ProgramIDs {
			if p := progs[id]; p != nil {
				own += agent.ProgramMemory(p)
				mapIDs = append(mapIDs, p.MapIDs)
			}
		}
		if a.memSets[0].Len() == 0 {
			a.memSets[0], a.memSets[1] = memorySets(a.attrs.ToSlice())
		}
		var maps uint64
		if v.node.mapsRead {
			maps = e.maps.sum.Sum(byID, mapIDs...)
		}
		addMemory(v, a.memSets[0], a.memSets[1], own, maps)
	}
}

// mapKeyState is a map key's attribute set, kept while the key is seen,
// and where this scan's series is in v.maps.
type mapKeyState struct {
	set attribute.Set
	gen uint64 // the scan that saw the key last
	idx int
}

// programGroup is a program's owner group, kept while the snapshot entry
// it was read from is handed out again (an unchanged program keeps its
// entry from scan to scan).
type programGroup struct {
	entry *agent.ProgramStat
	g     ownerGroup
	gen   uint64
}

// buildMaps fills v.maps (program and workload levels): each map under
// each owner group of its programs, so a map shared by programs of
// several workloads is in each workload's series, and once in each.
// Called with e.mu held. The key states and program groups persist
// across scans, pruned of what the scan did not see; a map whose entry
// did not change keeps its keys while no program's group moved, and when
// nothing moved at all the last view's series are this one's.
func (e *Exporter) buildMaps(s *agent.Snapshot, v *view, seen mapsSeen, prev *view) {
	st := &e.maps
	st.gen++
	gen := st.gen
	// A program that came or went changed the entries of the maps it
	// uses (their ProgramIDs); one whose owner group changed did not, and
	// moves every map's keys.
	moved := false
	for _, p := range s.Programs {
		pg := st.groups[p.ID]
		if pg == nil {
			pg = &programGroup{}
			st.groups[p.ID] = pg
		}
		if pg.entry != p {
			g := groupOf(&p.Program)
			moved = moved || pg.entry != nil && g != pg.g
			pg.entry, pg.g = p, g
		}
		pg.gen = gen
	}
	if len(st.groups) > len(s.Programs) {
		for id, pg := range st.groups {
			if pg.gen != gen {
				delete(st.groups, id)
			}
		}
	}
	// Nothing moved: the last view's series are this one's. The key
	// states need no stamp: only a rebuild prunes them, and it stamps
	// every key it meets with its own scan count.
	if !moved && seen.same && prev != nil && prev.node.mapsRead {
		v.maps = prev.maps
		return
	}
	n := len(s.Maps)
	if prev != nil && prev.node.mapsRead {
		n = len(prev.maps) // the keys rarely change: most scans have as many
	}
	v.maps = make([]mapSeries, 0, n)
	refs, refAt := st.refs2[:0], append(st.refA2[:0], 0)
	j := 0 // st.keyed's first map whose id is not below m's
	for _, m := range s.Maps {
		for j < len(st.keyed) && st.keyed[j].ID < m.ID {
			j++
		}
		if !moved && j < len(st.keyed) && st.keyed[j] == m {
			refs = append(refs, st.refs[st.refAt[j]:st.refAt[j+1]]...)
		} else {
			refs = e.mapKeysOf(m, refs)
		}
		refAt = append(refAt, int32(len(refs)))
		for _, k := range refs[refAt[len(refAt)-2]:] {
			if k.gen != gen {
				k.gen, k.idx = gen, len(v.maps)
				v.maps = append(v.maps, mapSeries{attrs: k.set})
			}
			v.maps[k.idx].add(m)
		}
	}
	st.keyed = s.Maps
	st.refs, st.refs2, st.refAt, st.refA2 = refs, st.refs, refAt, st.refAt
	if len(st.keys) > len(v.maps) {
		for k, ks := range st.keys {
			if ks.gen != gen {
				delete(st.keys, k)
			}
		}
	}
}

// mapKeysOf appends to refs the key states of m's series: one per owner
// group of its programs (the empty group when none).
func (e *Exporter) mapKeysOf(m *agent.Map, refs []*mapKeyState) []*mapKeyState {
	st := &e.maps
	var gs [4]ownerGroup
	groups := gs[:0]
	for _, id := range m.ProgramIDs {
		var g ownerGroup
		if pg := st.groups[id]; pg != nil {
			g = pg.g
		}
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if len(groups) == 0 {
		groups = append(groups, ownerGroup{})
	}
	for _, g := range groups {
		k := mapKey{name: stableName(m.Name), typ: m.Type, g: g}
		if e.cfg.Level == LevelProgram {
			k.id, k.name = m.ID, m.Name
		}
		ks := st.keys[k]
		if ks == nil {
			kv := make([]attribute.KeyValue, 0, 7)
			if k.id != 0 {
				kv = append(kv, attribute.Int64(attrMapID, int64(k.id)))
			}
			kv = append(kv, attribute.String(attrMapName, k.name), attribute.String(attrMapType, k.typ))
			ks = &mapKeyState{set: attribute.NewSet(k.g.kvs(kv)...)}
			st.keys[k] = ks
		}
		refs = append(refs, ks) // distinct groups: distinct keys
	}
	return refs
}

func observeNodeMemory(v *view, s sink) {
	s.Int(int64(v.node.programs), nodeProgramsSet)
	if v.node.mapsRead {
		s.Int(int64(v.node.maps), nodeMapsSet)
	}
}

func equalPtr(a, b *uint64) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}
