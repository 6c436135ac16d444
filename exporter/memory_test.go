package exporter

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// memProg is a program of workload ns/name (executable exe) using maps.
func memProg(id uint32, name, ns, workload, exe string, mapIDs ...uint32) agent.ProgramStat {
	p := prog(id, 0, nil)
	p.Name = name
	p.JitedSize, p.XlatedSize = 100*id, 10*id
	p.Memlock = u64(1000 * uint64(id))
	insns := 7 * id
	p.VerifiedInsns = &insns
	p.MapIDs = mapIDs
	p.Owners = []agent.Owner{{PID: int(id) + 100, Comm: exe, PodName: workload + "-pod", PodNamespace: ns, WorkloadKind: "DaemonSet", WorkloadName: workload, Via: "fd"}}
	return p
}

// bpfMap is a map; entries < 0: no count (not the hash family).
func bpfMap(id uint32, name, typ string, memory uint64, max uint32, entries int) agent.Map {
	m := agent.Map{ID: id, Name: name, Type: typ, MaxEntries: max, MemoryBytes: u64(memory)}
	if entries >= 0 {
		n := uint64(entries)
		f := float64(n) / float64(max)
		m.Entries, m.Fullness = &n, &f
	}
	return m
}

// evicted is m, an LRU map, with n evictions counted.
func evicted(m agent.Map, n uint64) agent.Map {
	m.Evictions = &n
	return m
}

// refusedUpdates is m with n refused updates counted.
func refusedUpdates(m agent.Map, n uint64) agent.Map {
	m.RefusedUpdates = &n
	return m
}

// withMaps is s with maps, their users joined as the agent joins them.
func withMaps(s *agent.Snapshot, maps ...agent.Map) *agent.Snapshot {
	for i := range maps {
		for _, p := range s.Programs {
			for _, id := range p.MapIDs {
				if id == maps[i].ID {
					maps[i].ProgramIDs = append(maps[i].ProgramIDs, p.ID)
				}
			}
		}
	}
	s.Maps, s.MapScan = make([]*agent.Map, len(maps)), agent.MapScan{Source: agent.ScanSourceIterator}
	for i := range maps {
		s.Maps[i] = &maps[i]
	}
	return s
}

// series renders a metric's points as sorted "labels=value" lines, the
// attributes named by keys only, for comparisons by eye.
func series(pts []point, keys ...string) []string {
	var out []string
	for _, p := range pts {
		var l []string
		for _, k := range keys {
			if v, ok := p.attrs.Value(attribute.Key(k)); ok {
				l = append(l, k+"="+v.String())
			}
		}
		out = append(out, fmt.Sprintf("%s %g", strings.Join(l, ","), p.value))
	}
	sort.Strings(out)
	return out
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestMapRollups holds the rollup rule of METRICS.md ("Maps and
// memory"): a map shared by several programs counts once per node and
// once per rollup it belongs to; a map without programs counts at the node
// and in a series without workload; a map without entries has no entries
// or fullness series.
func TestMapRollups(t *testing.T) {
	// Workload obs/tracer (executable tracer) has two program keys (enter,
	// exit) sharing map 10 "events" and each using map 11 "cfg"; enter
	// also uses map 12 of the same name "state_1a2b3c" as exit's map 13
	// "state_4d5e6f" (per-instance names, one key). Workload net/cni uses
	// map 10 too (shared across workloads) and its own array map 14.
	// Map 15 is pinned, used by no program.
	progs := []agent.ProgramStat{
		memProg(1, "enter", "obs", "tracer", "tracer", 10, 11, 12),
		memProg(2, "exit", "obs", "tracer", "tracer", 10, 11, 13),
		memProg(3, "filter", "net", "cni", "cni", 10, 14),
	}
	maps := []agent.Map{
		refusedUpdates(bpfMap(10, "events", "hash", 4096, 100, 95), 7),
		bpfMap(11, "cfg", "array", 512, 4, -1),
		evicted(bpfMap(12, "state_1a2b3c", "lru_hash", 2048, 10, 2), 40),
		evicted(bpfMap(13, "state_4d5e6f", "lru_hash", 1024, 10, 5), 2),
		bpfMap(14, "cnt", "percpu_array", 256, 1, -1),
		bpfMap(15, "pinned", "hash", 128, 8, 0),
	}
	own := func(ids ...uint32) uint64 { // ProgramMemory of memProg ids
		var n uint64
		for _, id := range ids {
			n += 1100 * uint64(id) // JIT image + memlock: the instructions are inside memlock
		}
		return n
	}
	mapKeys := []string{attrMapID, attrMapName, attrMapType, attrK8sWorkloadName}
	for _, tc := range []struct {
		level Level
		// want: metric name -> its series as series() renders them.
		want map[string][]string
	}{
		{LevelWorkload, map[string][]string{
			// events: once for tracer (two programs, two keys), once for
			// cni; the state maps summed under one key, fullness the
			// fuller; the pinned map without workload.
			"bpf.map.memory": {
				"bpf.map.name=cfg,bpf.map.type=array,k8s.workload.name=tracer 512",
				"bpf.map.name=cnt,bpf.map.type=percpu_array,k8s.workload.name=cni 256",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 4096",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 4096",
				"bpf.map.name=pinned,bpf.map.type=hash 128",
				"bpf.map.name=state_*,bpf.map.type=lru_hash,k8s.workload.name=tracer 3072",
			},
			"bpf.map.entries": {
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 95",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 95",
				"bpf.map.name=pinned,bpf.map.type=hash 0",
				"bpf.map.name=state_*,bpf.map.type=lru_hash,k8s.workload.name=tracer 7",
			},
			"bpf.map.max_entries": {
				"bpf.map.name=cfg,bpf.map.type=array,k8s.workload.name=tracer 4",
				"bpf.map.name=cnt,bpf.map.type=percpu_array,k8s.workload.name=cni 1",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 100",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 100",
				"bpf.map.name=pinned,bpf.map.type=hash 8",
				"bpf.map.name=state_*,bpf.map.type=lru_hash,k8s.workload.name=tracer 20",
			},
			"bpf.map.fullness": {
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 0.95",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 0.95",
				"bpf.map.name=pinned,bpf.map.type=hash 0",
				"bpf.map.name=state_*,bpf.map.type=lru_hash,k8s.workload.name=tracer 0.5",
			},
			// The LRU maps' evictions summed under their key.
			"bpf.map.evictions": {
				"bpf.map.name=state_*,bpf.map.type=lru_hash,k8s.workload.name=tracer 42",
			},
			// events is used by both workloads: each key has its count.
			"bpf.map.updates.refused": {
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 7",
				"bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 7",
			},
			// Per program key: enter uses events, cfg, state_1a2b3c; exit
			// events, cfg, state_4d5e6f; filter events, cnt.
			"bpf.program.memory": {
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.name=enter %d", 4096+512+2048),
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.name=exit %d", 4096+512+1024),
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.name=filter %d", 4096+256),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.name=enter %d", own(1)),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.name=exit %d", own(2)),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.name=filter %d", own(3)),
			},
			"bpf.program.verified_insns": {"bpf.program.name=enter 7", "bpf.program.name=exit 14", "bpf.program.name=filter 21"},
		}},
		{LevelProgram, map[string][]string{
			"bpf.map.memory": {
				"bpf.map.id=10,bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 4096",
				"bpf.map.id=10,bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 4096",
				"bpf.map.id=11,bpf.map.name=cfg,bpf.map.type=array,k8s.workload.name=tracer 512",
				"bpf.map.id=12,bpf.map.name=state_1a2b3c,bpf.map.type=lru_hash,k8s.workload.name=tracer 2048",
				"bpf.map.id=13,bpf.map.name=state_4d5e6f,bpf.map.type=lru_hash,k8s.workload.name=tracer 1024",
				"bpf.map.id=14,bpf.map.name=cnt,bpf.map.type=percpu_array,k8s.workload.name=cni 256",
				"bpf.map.id=15,bpf.map.name=pinned,bpf.map.type=hash 128",
			},
			"bpf.map.fullness": {
				"bpf.map.id=10,bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=cni 0.95",
				"bpf.map.id=10,bpf.map.name=events,bpf.map.type=hash,k8s.workload.name=tracer 0.95",
				"bpf.map.id=12,bpf.map.name=state_1a2b3c,bpf.map.type=lru_hash,k8s.workload.name=tracer 0.2",
				"bpf.map.id=13,bpf.map.name=state_4d5e6f,bpf.map.type=lru_hash,k8s.workload.name=tracer 0.5",
				"bpf.map.id=15,bpf.map.name=pinned,bpf.map.type=hash 0",
			},
			"bpf.map.evictions": {
				"bpf.map.id=12,bpf.map.name=state_1a2b3c,bpf.map.type=lru_hash,k8s.workload.name=tracer 40",
				"bpf.map.id=13,bpf.map.name=state_4d5e6f,bpf.map.type=lru_hash,k8s.workload.name=tracer 2",
			},
			"bpf.program.memory": {
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.id=1,bpf.program.name=enter %d", 4096+512+2048),
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.id=2,bpf.program.name=exit %d", 4096+512+1024),
				fmt.Sprintf("bpf.memory.kind=map,bpf.program.id=3,bpf.program.name=filter %d", 4096+256),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.id=1,bpf.program.name=enter %d", own(1)),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.id=2,bpf.program.name=exit %d", own(2)),
				fmt.Sprintf("bpf.memory.kind=program,bpf.program.id=3,bpf.program.name=filter %d", own(3)),
			},
			"bpf.program.verified_insns": {"bpf.program.id=1,bpf.program.name=enter 7", "bpf.program.id=2,bpf.program.name=exit 14", "bpf.program.id=3,bpf.program.name=filter 21"},
		}},
		{LevelOwner, map[string][]string{
			// Owner tracer-pod holds programs 1 and 2: events and cfg once.
			"bpf.owner.memory": {
				fmt.Sprintf("bpf.memory.kind=map,k8s.pod.name=cni-pod %d", 4096+256),
				fmt.Sprintf("bpf.memory.kind=map,k8s.pod.name=tracer-pod %d", 4096+512+2048+1024),
				fmt.Sprintf("bpf.memory.kind=program,k8s.pod.name=cni-pod %d", own(3)),
				fmt.Sprintf("bpf.memory.kind=program,k8s.pod.name=tracer-pod %d", own(1, 2)),
			},
		}},
		{LevelAttachType, map[string][]string{}},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			e, r, _ := newTestExporter(t, Config{Level: tc.level})
			s := withMaps(snapshot(1, progs...), maps...)
			s.Owners = []agent.OwnerStat{
				{Key: "c-tracer", PodName: "tracer-pod", Namespace: "obs", ProgramIDs: []uint32{1, 2}},
				{Key: "c-cni", PodName: "cni-pod", Namespace: "net", ProgramIDs: []uint32{3}},
			}
			e.Update(context.Background(), s)
			got, _ := collect(t, r)
			keys := map[string][]string{
				"bpf.program.memory":         {attrMemoryKind, attrProgramID, attrProgramName},
				"bpf.program.verified_insns": {attrProgramID, attrProgramName},
				"bpf.owner.memory":           {attrMemoryKind, attrK8sPodName},
			}
			for name, want := range tc.want {
				k := keys[name]
				if k == nil {
					k = mapKeys
				}
				sameLines(t, name, series(got[name], k...), want)
			}
			// Each map once at every level, with or without programs.
			sameLines(t, "bpf.node.memory", series(got["bpf.node.memory"], attrMemoryKind), []string{
				fmt.Sprintf("bpf.memory.kind=map %d", 4096+512+2048+1024+256+128),
				fmt.Sprintf("bpf.memory.kind=program %d", own(1, 2, 3)),
			})
			if v := value0(got["bpf.agent.maps"]); v != 6 {
				t.Errorf("bpf.agent.maps = %v, want 6", v)
			}
			if tc.level == LevelAttachType || tc.level == LevelOwner {
				for _, n := range []string{"bpf.map.memory", "bpf.map.fullness", "bpf.program.memory"} {
					if len(got[n]) > 0 {
						t.Errorf("%s at level %v: %v", n, tc.level, got[n])
					}
				}
			}
		})
	}
}

// Without maps read (--no-maps, or a failed map scan) no map figure is
// exported, rather than zeros; the programs' own memory still is.
func TestNoMapsNoMapSeries(t *testing.T) {
	for _, scan := range []agent.MapScan{{}, {Source: agent.ScanSourceIterator, Error: "reading maps: boom"}} {
		e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
		s := snapshot(1, memProg(1, "enter", "obs", "tracer", "tracer", 10))
		s.MapScan = scan
		e.Update(context.Background(), s)
		got, _ := collect(t, r)
		for _, n := range []string{"bpf.map.memory", "bpf.map.max_entries", "bpf.agent.maps", "bpf.agent.map_scan.source"} {
			if len(got[n]) > 0 {
				t.Errorf("map scan %+v: %s exported: %v", scan, n, got[n])
			}
		}
		if want := float64(b2i(scan.Error != "")); value0(got["bpf.agent.scan.errors"]) != want {
			t.Errorf("map scan %+v: scan errors %v, want %v", scan, got["bpf.agent.scan.errors"], want)
		}
		sameLines(t, "bpf.node.memory", series(got["bpf.node.memory"], attrMemoryKind), []string{"bpf.memory.kind=program 1100"})
		sameLines(t, "bpf.program.memory", series(got["bpf.program.memory"], attrMemoryKind), []string{"bpf.memory.kind=program 1100"})
	}
}

// A map reloaded under a new id (its program too) continues the workload
// level's series: same attributes, the new map's values.
func TestMapSeriesSurviveReload(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	e.Update(context.Background(), withMaps(snapshot(1, memProg(1, "enter", "obs", "tracer", "tracer", 10)), bpfMap(10, "events", "hash", 4096, 100, 95)))
	first, _ := collect(t, r)
	e.Update(context.Background(), withMaps(snapshot(2, memProg(2, "enter", "obs", "tracer", "tracer", 20)), bpfMap(20, "events", "hash", 4096, 100, 40)))
	second, _ := collect(t, r)
	if len(first["bpf.map.fullness"]) != 1 || len(second["bpf.map.fullness"]) != 1 {
		t.Fatalf("fullness series: %v, then %v; want one each", first["bpf.map.fullness"], second["bpf.map.fullness"])
	}
	a, b := first["bpf.map.fullness"][0], second["bpf.map.fullness"][0]
	if !a.attrs.Equals(&b.attrs) || a.value != 0.95 || b.value != 0.4 {
		t.Errorf("across the reload: %v %v, then %v %v; want the same series, 0.95 then 0.4", a.attrs.Encoded(attribute.DefaultEncoder()), a.value, b.attrs.Encoded(attribute.DefaultEncoder()), b.value)
	}
}

// At the program level every reload makes new map keys (new ids): the
// exporter keeps the state of those the latest scan saw, no more.
func TestMapStateForgetsUnloaded(t *testing.T) {
	e, _, _ := newTestExporter(t, Config{Level: LevelProgram})
	for i := uint32(1); i <= 5; i++ {
		e.Update(context.Background(), withMaps(snapshot(uint64(i), memProg(i, "enter", "obs", "tracer", "tracer", 10*i)), bpfMap(10*i, "events", "hash", 4096, 100, 1), bpfMap(10*i+1, "pinned", "array", 64, 1, -1)))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.maps.keys) != 2 || len(e.maps.groups) != 1 {
		t.Errorf("after 5 reloads: %d map keys, %d program groups kept; want 2 and 1", len(e.maps.keys), len(e.maps.groups))
	}
}

// TestWorkloadMemoryFollowsChanges: a scan that changes nothing the memory
// comes from reuses the last scan's series (memory.go), so every change
// must still show: a map's memory moving, a program moving to another
// key, a program loaded beside the others.
func TestWorkloadMemoryFollowsChanges(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	mem := func(kind, workload string) float64 {
		t.Helper()
		got, _ := collect(t, r)
		for _, p := range got["bpf.program.memory"] {
			k, _ := p.attrs.Value(attrMemoryKind)
			w, _ := p.attrs.Value(attrK8sWorkloadName)
			if k.AsString() == kind && w.AsString() == workload {
				return p.value
			}
		}
		return -1
	}
	ctx := context.Background()
	update := func(seq uint64, workload string, memory uint64, progs ...agent.ProgramStat) {
		ps := append([]agent.ProgramStat{memProg(1, "enter", "obs", workload, "tracer", 10)}, progs...)
		e.Update(ctx, withMaps(snapshot(seq, ps...), bpfMap(10, "events", "hash", memory, 100, 5)))
	}
	update(1, "tracer", 4096)
	if m := mem("map", "tracer"); m != 4096 {
		t.Fatalf("map memory %v, want 4096", m)
	}
	update(2, "tracer", 4096)
	update(3, "tracer", 8192) // a NO_PREALLOC hash grew
	if m := mem("map", "tracer"); m != 8192 {
		t.Errorf("after the map grew: %v, want 8192", m)
	}
	update(4, "tracer2", 8192) // the same program, now another workload's
	if m, old := mem("map", "tracer2"), mem("map", "tracer"); m != 8192 || old > 0 {
		t.Errorf("after the move: new key %v, old key %v; want 8192 and nothing", m, old)
	}
	update(5, "tracer2", 8192, memProg(2, "exit", "obs", "tracer2", "tracer", 10))
	if m := mem("map", "tracer2"); m != 8192 {
		t.Errorf("a second program of the key using the same map: %v, want it counted once: 8192", m)
	}
}

// TestMapSeriesWithSharedEntries: the agent hands out an unchanged map's
// entry again, and the exporter then keeps that map's keys, or the whole
// last view's series when nothing moved; every change must still show: a
// program moving to another workload (the map's entry unchanged), a map
// with a new count, a map gone.
func TestMapSeriesWithSharedEntries(t *testing.T) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		t.Run(level.String(), func(t *testing.T) {
			e, r, _ := newTestExporter(t, Config{Level: level})
			events, pinned := bpfMap(10, "events", "hash", 4096, 100, 20), bpfMap(11, "pinned", "array", 64, 1, -1)
			events.ProgramIDs = []uint32{1}
			maps := []*agent.Map{&events, &pinned}
			update := func(seq uint64, workload string, maps []*agent.Map) map[string]float64 {
				t.Helper()
				s := snapshot(seq, memProg(1, "enter", "obs", workload, "tracer", 10))
				s.Maps, s.MapScan = maps, agent.MapScan{Source: agent.ScanSourceIterator}
				e.Update(context.Background(), s)
				got, _ := collect(t, r)
				out := map[string]float64{}
				for _, p := range got["bpf.map.entries"] {
					w, _ := p.attrs.Value(attrK8sWorkloadName)
					n, _ := p.attrs.Value(attrMapName)
					out[n.AsString()+"/"+w.AsString()] = p.value
				}
				for _, p := range got["bpf.map.max_entries"] {
					n, _ := p.attrs.Value(attrMapName)
					out[n.AsString()+" max"] = p.value
				}
				return out
			}
			check := func(what string, got, want map[string]float64) {
				t.Helper()
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s: %v, want %v", what, got, want)
				}
			}
			check("first", update(1, "tracer", maps), map[string]float64{"events/tracer": 20, "events max": 100, "pinned max": 1})
			e.mu.Lock()
			before := e.view.maps
			e.mu.Unlock()
			check("nothing moved", update(2, "tracer", slices.Clone(maps)), map[string]float64{"events/tracer": 20, "events max": 100, "pinned max": 1})
			e.mu.Lock()
			if len(before) == 0 || &e.view.maps[0] != &before[0] {
				t.Errorf("nothing moved and the map series were built again")
			}
			e.mu.Unlock()
			check("the program moved", update(3, "tracer2", slices.Clone(maps)), map[string]float64{"events/tracer2": 20, "events max": 100, "pinned max": 1})
			grown := events
			n := uint64(30)
			grown.Entries = &n
			check("a new count", update(4, "tracer2", []*agent.Map{&grown, &pinned}), map[string]float64{"events/tracer2": 30, "events max": 100, "pinned max": 1})
			check("a map gone", update(5, "tracer2", []*agent.Map{&grown}), map[string]float64{"events/tracer2": 30, "events max": 100})
		})
	}
}

// A failed map read forgets the maps the exporter kept by id: a program
// whose map is not in the next read has no map memory, not the old one.
func TestMapIndexAfterFailedRead(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelProgram})
	ctx := context.Background()
	mapMemory := func() float64 {
		t.Helper()
		got, _ := collect(t, r)
		for _, p := range got["bpf.program.memory"] {
			if k, _ := p.attrs.Value(attrMemoryKind); k.AsString() == memoryMap {
				return p.value
			}
		}
		return -1
	}
	e.Update(ctx, withMaps(snapshot(1, memProg(1, "enter", "obs", "tracer", "tracer", 10)), bpfMap(10, "events", "hash", 4096, 100, 5)))
	if m := mapMemory(); m != 4096 {
		t.Fatalf("map memory %v, want 4096", m)
	}
	failed := snapshot(2, memProg(1, "enter", "obs", "tracer", "tracer", 10))
	failed.MapScan = agent.MapScan{Source: agent.ScanSourceIterator, Error: "reading maps: test"}
	e.Update(ctx, failed)
	if m := mapMemory(); m != -1 {
		t.Errorf("after a failed read: map memory %v, want none", m)
	}
	e.Update(ctx, withMaps(snapshot(3, memProg(1, "enter", "obs", "tracer", "tracer", 10))))
	if m := mapMemory(); m != 0 {
		t.Errorf("after a read without the map: map memory %v, want 0", m)
	}
}

// The map series are held to the SDK's cardinality limit as the
// instruments are, though produced: the series over it are left out and
// counted in bpf.agent.programs.dropped, never silent.
func TestMapSeriesCardinalityLimit(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelProgram, MaxPrograms: 1})
	limit := cardinalityLimit(1)
	maps := make([]agent.Map, 0, limit+10)
	for i := range limit + 10 {
		maps = append(maps, bpfMap(uint32(i+1), fmt.Sprintf("m%d", i), "hash", 4096, 100, 5))
	}
	e.Update(context.Background(), withMaps(snapshot(1), maps...))
	got, _ := collect(t, r)
	for _, name := range []string{"bpf.map.memory", "bpf.map.entries", "bpf.map.max_entries", "bpf.map.fullness"} {
		if n := len(got[name]); n != limit-1 {
			t.Errorf("%s: %d series, want %d (the limit, less the SDK's overflow series)", name, n, limit-1)
		}
	}
	if v := value0(got["bpf.agent.programs.dropped"]); v != 11 {
		t.Errorf("dropped = %v, want the 11 map series over the limit", v)
	}
}
