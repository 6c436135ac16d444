package exporter

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// Values of bpf.memory.kind: a program's own memory (JIT image,
// translated instructions, its memlock charge) or the maps'.
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
}

func (ms *mapSeries) add(m *agent.Map) {
	ms.capacity += uint64(m.MaxEntries)
	if m.MemoryBytes != nil {
		ms.memory += *m.MemoryBytes
		ms.hasMemory = true
	}
	if m.Entries != nil {
		ms.entries += *m.Entries
		ms.hasEntries = true
	}
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
}

// buildNodeMemory fills v.node and returns the snapshot's maps by id (nil
// when the maps were not read).
func buildNodeMemory(s *agent.Snapshot, v *view) map[uint32]*agent.Map {
	for _, p := range s.Programs {
		v.node.programs += agent.ProgramMemory(&p.Program)
	}
	if s.MapScan.Source == "" || s.MapScan.Error != "" {
		return nil
	}
	byID := make(map[uint32]*agent.Map, len(s.Maps))
	for i := range s.Maps {
		m := &s.Maps[i]
		byID[m.ID] = m
		if m.MemoryBytes != nil {
			v.node.maps += *m.MemoryBytes
		}
	}
	v.node.mapsRead, v.node.count = true, len(s.Maps)
	v.node.source = attribute.NewSet(attribute.String(attrScanSource, s.MapScan.Source),
		attribute.String(attrScanFallbackReason, s.MapScan.FallbackReason))
	return byID
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
		maps = e.sum.Sum(byID, p.MapIDs)
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
func (e *Exporter) workloadMemory(s *agent.Snapshot, v *view, byID map[uint32]*agent.Map, prev *view) {
	// Most scans change nothing the figures come from: no program loaded,
	// unloaded or moved to another key, and every map's memory as before.
	// The last view's series are then this one's (views are never
	// written), which spares a slice of two series per key every scan.
	mapsSame := sameMapMemory(e.prevMaps, s.Maps) && (byID != nil) == (prev != nil && prev.node.mapsRead)
	e.prevMaps = s.Maps
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
			maps = e.sum.Sum(byID, w.mem.mapIDs...)
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
			maps = e.sum.Sum(byID, mapIDs...)
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
// across scans (no per-scan maps: at 1,000 maps they were most of the
// work), pruned of what the scan did not see.
func (e *Exporter) buildMaps(s *agent.Snapshot, v *view) {
	e.mapGen++
	gen := e.mapGen
	for _, p := range s.Programs {
		pg := e.mapGroups[p.ID]
		if pg == nil {
			pg = &programGroup{}
			e.mapGroups[p.ID] = pg
		}
		if pg.entry != p {
			pg.entry, pg.g = p, groupOf(&p.Program)
		}
		pg.gen = gen
	}
	if len(e.mapGroups) > len(s.Programs) {
		for id, pg := range e.mapGroups {
			if pg.gen != gen {
				delete(e.mapGroups, id)
			}
		}
	}
	v.maps = make([]mapSeries, 0, len(s.Maps))
	var gs []ownerGroup
	for i := range s.Maps {
		m := &s.Maps[i]
		gs = gs[:0]
		for _, id := range m.ProgramIDs {
			var g ownerGroup
			if pg := e.mapGroups[id]; pg != nil {
				g = pg.g
			}
			dup := false
			for _, h := range gs {
				dup = dup || h == g
			}
			if !dup {
				gs = append(gs, g)
			}
		}
		if len(gs) == 0 {
			gs = append(gs, ownerGroup{})
		}
		for _, g := range gs {
			k := mapKey{name: stableName(m.Name), typ: m.Type, g: g}
			if e.cfg.Level == LevelProgram {
				k.id, k.name = m.ID, m.Name
			}
			st := e.mapKeys[k]
			if st == nil {
				kv := make([]attribute.KeyValue, 0, 7)
				if k.id != 0 {
					kv = append(kv, attribute.Int64(attrMapID, int64(k.id)))
				}
				kv = append(kv, attribute.String(attrMapName, k.name), attribute.String(attrMapType, k.typ))
				st = &mapKeyState{set: attribute.NewSet(k.g.kvs(kv)...)}
				e.mapKeys[k] = st
			}
			if st.gen != gen {
				st.gen, st.idx = gen, len(v.maps)
				v.maps = append(v.maps, mapSeries{attrs: st.set})
			}
			v.maps[st.idx].add(m)
		}
	}
	if len(e.mapKeys) > len(v.maps) {
		for k, st := range e.mapKeys {
			if st.gen != gen {
				delete(e.mapKeys, k)
			}
		}
	}
}

// Observers of the memory and map rows (metrics.go).

func observeMaps(val func(*mapSeries) (float64, bool), float bool) func(*view, sink) {
	return func(v *view, s sink) {
		for i := range v.maps {
			x, ok := val(&v.maps[i])
			switch {
			case !ok:
			case float:
				s.Float(x, v.maps[i].attrs)
			default:
				s.Int(int64(x), v.maps[i].attrs)
			}
		}
	}
}

func observeValues(series func(*view) []valueSeries) func(*view, sink) {
	return func(v *view, s sink) {
		for _, x := range series(v) {
			s.Int(int64(x.v), x.attrs)
		}
	}
}

func mapMemory(m *mapSeries) (float64, bool)   { return float64(m.memory), m.hasMemory }
func mapEntries(m *mapSeries) (float64, bool)  { return float64(m.entries), m.hasEntries }
func mapCapacity(m *mapSeries) (float64, bool) { return float64(m.capacity), true }
func mapFullness(m *mapSeries) (float64, bool) { return m.fullness, m.hasFullness }
func memorySeries(v *view) []valueSeries       { return v.memory }
func insnSeries(v *view) []valueSeries         { return v.insns }

func observeNodeMemory(v *view, s sink) {
	s.Int(int64(v.node.programs), nodeProgramsSet)
	if v.node.mapsRead {
		s.Int(int64(v.node.maps), nodeMapsSet)
	}
}

// sameMapMemory says two snapshots' maps are the same maps with the same
// memory (both ascending by id, as the agent reads them).
func sameMapMemory(a, b []agent.Map) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !equalPtr(a[i].MemoryBytes, b[i].MemoryBytes) {
			return false
		}
	}
	return true
}

func equalPtr(a, b *uint64) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}
