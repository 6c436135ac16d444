package agent

import (
	"encoding/json"
	"fmt"
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/agent/internal/stats"
)

// refAttachTypes sums every program per attach type, from scratch: the
// reference the incremental aggregates are held to.
func refAttachTypes(progs []*ProgramStat, dt time.Duration, overhead map[string]float64) []AttachTypeStat {
	idx := map[string]int{}
	var out []AttachTypeStat
	for _, p := range progs {
		j, ok := idx[p.AttachType]
		if !ok {
			j = len(out)
			idx[p.AttachType] = j
			out = append(out, AttachTypeStat{AttachType: p.AttachType})
		}
		a := &out[j]
		a.Programs++
		a.RunCount += p.RunCount
		a.RunTimeNs += p.RunTimeNs
		refAddMisses(&a.RecursionMisses, p.RecursionMisses)
		a.LinkMissed += prog.CountersOf(&p.Program).LinkMissed
		prog.AddRates(&a.Delta, p.Delta)
	}
	for i := range out {
		out[i].Delta = prog.WithRates(out[i].Delta, dt)
		if v, ok := overhead[out[i].AttachType]; ok {
			out[i].OverheadNs = &v
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].AttachType < out[b].AttachType })
	return out
}

// refOwners sums every program per owner, from scratch (a program held by
// two owners counts for each of them).
func refOwners(progs []*ProgramStat, dt time.Duration) []OwnerStat {
	idx := map[string]int{}
	var out []OwnerStat
	for _, p := range progs {
		seen := map[string]bool{}
		for k := range p.Owners {
			o := &p.Owners[k]
			key := ownerKey(o)
			if seen[key] {
				continue
			}
			seen[key] = true
			j, ok := idx[key]
			if !ok {
				j = len(out)
				idx[key] = j
				st := OwnerStat{Key: key, ContainerID: o.ContainerID, PodUID: o.PodUID, PodName: o.PodName, Namespace: o.PodNamespace}
				if o.ContainerID == "" {
					st.PID, st.Comm = o.PID, o.Comm
				}
				out = append(out, st)
			}
			s := &out[j]
			s.ProgramIDs = append(s.ProgramIDs, p.ID)
			s.RunCount += p.RunCount
			s.RunTimeNs += p.RunTimeNs
			refAddMisses(&s.RecursionMisses, p.RecursionMisses)
			prog.AddRates(&s.Delta, p.Delta)
		}
	}
	for i := range out {
		out[i].Delta = prog.WithRates(out[i].Delta, dt)
	}
	sort.Slice(out, func(a, b int) bool {
		return out[a].Delta.RunTimeNs > out[b].Delta.RunTimeNs || (out[a].Delta.RunTimeNs == out[b].Delta.RunTimeNs && out[a].Key < out[b].Key)
	})
	return out
}

// refAddMisses adds a program's recursion_misses v to an aggregate's
// *sum, which stays nil until some program has them.
func refAddMisses(sum **uint64, v *uint64) {
	if v == nil {
		return
	}
	if *sum == nil {
		*sum = new(uint64)
	}
	**sum += *v
}

// fromScratch is aggregates that saw every program of progs come.
func fromScratch(progs []*ProgramStat) *aggregates {
	g := &aggregates{}
	g.begin()
	for _, p := range progs {
		g.replace(nil, p)
	}
	return g
}

// fleet is a model of a node's programs for TestAggregatesIncremental:
// what the reader would return for each, changed at random between scans.
type fleet struct {
	rng    *rand.Rand
	next   uint32
	progs  map[uint32]*Program
	linkID uint32
	// withMisses says whether a new program has recursion_misses; nil:
	// two in three do.
	withMisses func(*rand.Rand) bool
}

var (
	fleetAttach = []struct{ attach, typ string }{
		{"fentry", "tracing"}, {"tp_btf", "tracing"}, {"raw_tp", "raw_tracepoint"}, {"xdp", "xdp"},
		{"kprobe", "kprobe"}, {Unattached, "socket_filter"}, {"cgroup_skb", "cgroup_skb"}, {"struct_ops", "struct_ops"},
	}
	fleetOwners = []Owner{
		{PID: 1, Comm: "cilium-agent", ContainerID: "c1", PodName: "cilium-x", PodNamespace: "kube-system", Via: "fd"},
		{PID: 2, Comm: "cilium-agent", ContainerID: "c1", Via: "link"},
		{PID: 3, Comm: "bpftrace", Via: "fd"},
		{PID: 4, Comm: "falco", ContainerID: "c2", PodUID: "u2", Via: "fd"},
	}
)

func (f *fleet) add() {
	f.next++
	a := fleetAttach[f.rng.IntN(len(fleetAttach))]
	uid := uint32(0)
	p := &Program{ID: f.next, Name: fmt.Sprintf("p%d", f.next), Tag: "t", Type: a.typ, AttachType: a.attach, UID: &uid,
		MapIDs: []uint32{}, LoadTime: time.Unix(0, 0), Links: []Link{}, Owners: f.owners()}
	if f.withMisses == nil && f.rng.IntN(3) > 0 || f.withMisses != nil && f.withMisses(f.rng) {
		m := uint64(0)
		p.RecursionMisses = &m
	}
	if a.attach == "kprobe" {
		f.linkID++
		m := uint64(0)
		p.Links = []Link{{ID: f.linkID, ProgID: p.ID, Type: "perf_event", AttachType: "kprobe", Target: "f", Missed: &m}}
	}
	f.progs[p.ID] = p
}

func (f *fleet) owners() []Owner {
	out := []Owner{}
	for _, o := range fleetOwners {
		if f.rng.IntN(4) == 0 {
			out = append(out, o)
		}
	}
	return out
}

// step changes the fleet as one interval might, and returns the ids whose
// program changed in any way, and whether anything but counters changed
// (else the reader would have kept every program's joins: joinsKept).
func (f *fleet) step() (changed map[uint32]bool, joinsKept bool) {
	changed = map[uint32]bool{}
	joinsKept = true
	quiet := f.rng.IntN(2) == 0 // only counters move
	ids := f.ids()
	for _, id := range ids {
		p := f.progs[id]
		was := *p
		r := f.rng.IntN(100)
		if quiet && r >= 10 {
			continue
		}
		switch {
		case r < 8: // ran
			n := uint64(1 + f.rng.IntN(1000))
			p.RunCount += n
			p.RunTimeNs += n * uint64(50+f.rng.IntN(100))
		case r < 10 && p.RecursionMisses != nil: // missed
			m := *p.RecursionMisses + uint64(1+f.rng.IntN(5))
			p.RecursionMisses = &m
		case r < 11 && len(p.Links) > 0 && p.Links[0].Missed != nil: // kprobe missed
			m := *p.Links[0].Missed + 3
			p.Links = []Link{p.Links[0]}
			p.Links[0].Missed = &m
			joinsKept = false
		case r < 12: // owners re-read: a process came or went
			p.Owners = f.owners()
			joinsKept = false
		case r < 13: // attached elsewhere
			a := fleetAttach[f.rng.IntN(len(fleetAttach))]
			if a.typ == p.Type {
				p.AttachType = a.attach
			}
			joinsKept = false
		case r < 14: // unloaded
			delete(f.progs, id)
			changed[id] = true
			joinsKept = false
			continue
		}
		// Owners re-read, or attached again, may be what they were.
		changed[id] = !reflect.DeepEqual(was, *p)
	}
	for range f.rng.IntN(3) {
		if !quiet && f.rng.IntN(4) == 0 {
			f.add()
			changed[f.next] = true
			joinsKept = false
		}
	}
	return changed, joinsKept
}

func (f *fleet) ids() []uint32 {
	ids := make([]uint32, 0, len(f.progs))
	for id := range f.progs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// read is what the reader hands Agent.Scan: fresh Programs in id order,
// their slices rebuilt as a scan's join does (equal content, new memory).
func (f *fleet) read() []Program {
	out := make([]Program, 0, len(f.progs))
	for _, id := range f.ids() {
		p := *f.progs[id]
		p.Links = slices.Clone(p.Links)
		if f.rng.IntN(2) == 0 {
			p.Owners = slices.Clone(p.Owners)
		}
		out = append(out, p)
	}
	return out
}

// TestAggregatesIncremental runs many scans over a fleet whose programs
// run, miss, change owners and attach types, come and go at random, and
// holds every snapshot to what a from-scratch computation gives: the
// attach types, owners and stats tax equal the reference sums over every
// entry; an idle, unchanged program's entry is the previous snapshot's very
// entry while a changed program gets a new one; and no snapshot handed out
// ever changes afterwards (the API's history keeps them).
//
// The fleets differ in which programs have recursion_misses: most, none
// (a 5.10 kernel: every aggregate's is absent) or few, so that an attach
// type's or owner's turns absent when the last program with the counter
// goes and known again when one comes.
func TestAggregatesIncremental(t *testing.T) {
	for _, tc := range []struct {
		seed   uint64
		misses string
	}{{1, "most"}, {2, "most"}, {3, "most"}, {4, "most"}, {5, "most"}, {6, "most"}, {7, "none"}, {8, "few"}, {9, "few"}} {
		t.Run(fmt.Sprintf("%d_%s", tc.seed, tc.misses), func(t *testing.T) {
			testAggregatesIncremental(t, tc.seed, tc.misses)
		})
	}
}

func testAggregatesIncremental(t *testing.T, seed uint64, missing string) {
	withMisses := map[string]func(*rand.Rand) bool{
		"none": func(*rand.Rand) bool { return false },
		"few":  func(r *rand.Rand) bool { return r.IntN(60) == 0 },
	}[missing]
	f := &fleet{rng: rand.New(rand.NewPCG(seed, 7)), progs: map[uint32]*Program{}, withMisses: withMisses}
	for range 150 {
		f.add()
	}
	costs := []StatsCost{{Kind: "raw_tp", Measured: true, TaxNs: 80.5}, {Kind: "xdp", Measured: true, TaxNs: 71.25}, {Kind: "tc", Measured: true, TaxNs: 60}}
	a := &Agent{eps: misses.NewTracker(2), kernel: KernelInfo{Preempt: "PREEMPT_NONE"}, statsCosts: costs}
	a.SetCalibration([]Calibration{{AttachType: "fentry", Supported: true, OverheadNs: 12}, {AttachType: "xdp", Supported: true, OverheadNs: 3}})
	overhead := map[string]float64{"fentry": 12, "xdp": 3}
	state := StatsState{Enabled: true, HeldByAgent: true, Mode: StatsAlways}
	now := time.Unix(1000, 0)
	var prev *Snapshot
	var snaps []*Snapshot
	var frozen [][]byte
	shared, fresh, keptScans := 0, 0, 0
	// Aggregates with recursion_misses absent and known, and how often
	// one turned from one to the other between scans.
	absent, known, turned := 0, 0, 0
	wasKnown := map[string]bool{}
	count := func(key string, m *uint64) {
		if m == nil {
			absent++
		} else {
			known++
		}
		if was, ok := wasKnown[key]; ok && was != (m != nil) {
			turned++
		}
		wasKnown[key] = m != nil
	}
	for scan := range 400 {
		changed, kept := map[uint32]bool{}, false
		if scan > 0 {
			changed, kept = f.step()
		}
		if scan == 200 {
			// New costs: the tax's per-type part is counted again.
			costs = append(slices.Clone(costs[:2]), StatsCost{Kind: "tp_btf", Measured: true, TaxNs: 90})
			a.statsCosts = costs
		}
		var dt time.Duration
		if prev != nil {
			dt = time.Second
		}
		now = now.Add(time.Second)
		snap := &Snapshot{Seq: uint64(scan + 1), Time: now, Interval: dt, Stats: state}
		a.assemble(snap, reader.View{Progs: f.read()}, dt, nil, kept)
		a.prevTime = now

		if got, want := snap.AttachTypes, refAttachTypes(snap.Programs, dt, overhead); !reflect.DeepEqual(got, want) {
			t.Fatalf("scan %d: attach types\n got %s\nwant %s", scan, asJSON(got), asJSON(want))
		}
		if got, want := snap.Owners, refOwners(snap.Programs, dt); !reflect.DeepEqual(got, want) {
			t.Fatalf("scan %d: owners\n got %s\nwant %s", scan, asJSON(got), asJSON(want))
		}
		for _, at := range snap.AttachTypes {
			count("type "+at.AttachType, at.RecursionMisses)
		}
		for _, o := range snap.Owners {
			count("owner "+o.Key, o.RecursionMisses)
		}
		if got, want := snap.StatsTax, stats.ComputeTax(snap.Programs, costs, state, dt, now); !reflect.DeepEqual(got, want) {
			t.Fatalf("scan %d: stats tax\n got %+v\nwant %+v", scan, got, want)
		}
		if len(snap.Programs) != len(f.progs) {
			t.Fatalf("scan %d: %d programs, the fleet has %d", scan, len(snap.Programs), len(f.progs))
		}
		if prev != nil {
			before := map[uint32]*ProgramStat{}
			for _, e := range prev.Programs {
				before[e.ID] = e
			}
			for _, e := range snap.Programs {
				old := before[e.ID]
				want := old != nil && !changed[e.ID] && old.Delta == (Rates{}) && !old.New
				if got := e == old; got != want {
					t.Fatalf("scan %d: program %d shares the previous entry: %v, want %v (changed %v, previous %+v)", scan, e.ID, got, want, changed[e.ID], old)
				}
				if e == old {
					shared++
				} else {
					fresh++
				}
				if want, got := *f.progs[e.ID], e.Program; got.RunCount != want.RunCount || !slices.Equal(got.Owners, want.Owners) || got.AttachType != want.AttachType {
					t.Fatalf("scan %d: program %d is %+v, want %+v", scan, e.ID, got, want)
				}
			}
		}
		b, err := json.Marshal(snap)
		if err != nil {
			t.Fatal(err)
		}
		snaps, frozen = append(snaps, snap), append(frozen, b)
		if kept {
			keptScans++
		}
		prev = snap
	}
	for i, s := range snaps {
		b, _ := json.Marshal(s)
		if string(b) != string(frozen[i]) {
			t.Fatalf("snapshot %d changed after it was handed out", s.Seq)
		}
	}
	t.Logf("%d entries shared with the previous snapshot, %d new; %d scans with joins kept", shared, fresh, keptScans)
	if shared == 0 || fresh == 0 || keptScans == 0 || keptScans == len(snaps)-1 {
		t.Errorf("the fleet exercised only some cases: %d shared, %d new, %d of %d scans with joins kept", shared, fresh, keptScans, len(snaps))
	}
	t.Logf("aggregates' recursion_misses: %d absent, %d known, %d turned", absent, known, turned)
	switch {
	case missing == "none" && known > 0:
		t.Errorf("%d aggregates have recursion_misses, though no program has", known)
	case missing == "most" && known == 0:
		t.Errorf("no aggregate has recursion_misses, though most programs have")
	case missing == "few" && turned == 0:
		t.Errorf("no aggregate's recursion_misses turned absent or known (%d absent, %d known)", absent, known)
	}
}

// TestSameDynamic changes each field a scan sets: sameDynamic must see
// every change (else a changed program would keep its old entry), and must
// not see new memory with equal content (a scan's joins build new slices).
func TestSameDynamic(t *testing.T) {
	m, sl := uint64(3), true
	s := Program{ID: 3, Name: "n", AttachType: "kprobe", RunCount: 5, RecursionMisses: &m, Sleepable: &sl,
		Links: []Link{{ID: 1, Missed: &m}}, Owners: []Owner{{PID: 1}}, Pins: []string{"/sys/fs/bpf/x"}}
	copyOf := func(p Program) Program {
		m2, sl2, m3 := *p.RecursionMisses, *p.Sleepable, *p.Links[0].Missed
		p.RecursionMisses, p.Sleepable = &m2, &sl2
		p.Links = slices.Clone(p.Links)
		p.Links[0].Missed = &m3
		p.Owners, p.Pins = slices.Clone(p.Owners), slices.Clone(p.Pins)
		return p
	}
	if c := copyOf(s); !sameDynamic(&c, &s) {
		t.Fatal("an equal copy in new memory differs")
	}
	scantest.EachDynamicChange(t, func() Program { return copyOf(s) }, func(name string, p Program) {
		if sameDynamic(&p, &s) {
			t.Errorf("sameDynamic misses a change of %s", name)
		}
	})
	// JSON tells null from []: a nil list is a change.
	for _, f := range []func(*Program){func(p *Program) { p.Links = nil }, func(p *Program) { p.Owners = nil }} {
		p := copyOf(s)
		f(&p)
		if sameDynamic(&p, &s) {
			t.Errorf("a nil list counts as the same: %+v", p)
		}
	}
	// A link's counter moved.
	p := copyOf(s)
	*p.Links[0].Missed = 4
	if sameDynamic(&p, &s) {
		t.Error("sameDynamic misses a link's missed counter")
	}
}

// TestOneShotScansAgain: a one-shot read's scan keeps no states, yet a
// second scan of the same agent has the deltas a kept state would give.
func TestOneShotScansAgain(t *testing.T) {
	f := &fleet{rng: rand.New(rand.NewPCG(9, 7)), progs: map[uint32]*Program{}}
	for range 50 {
		f.add()
	}
	lazy, kept := &Agent{eps: misses.NewTracker(2)}, &Agent{eps: misses.NewTracker(2)}
	now := time.Unix(1000, 0)
	var snaps [2]*Snapshot
	for scan := range 3 {
		if scan > 0 {
			f.step()
		}
		read := f.read()
		for k, a := range []*Agent{lazy, kept} {
			progs := reader.View{Progs: slices.Clone(read)}
			if k == 0 && scan == 0 {
				progs = reader.View{Stats: make([]ProgramStat, len(read))} // as readIterOnce builds them
				for i := range read {
					progs.Stats[i].Program = read[i]
				}
			}
			var dt time.Duration
			if scan > 0 {
				dt = time.Second
			}
			snaps[k] = &Snapshot{Time: now.Add(time.Duration(scan) * time.Second), Interval: dt}
			a.assemble(snaps[k], progs, dt, nil, false)
			a.prevTime = snaps[k].Time
		}
		if len(lazy.prevIDs) != 0 && scan == 0 {
			t.Fatalf("the one-shot scan kept %d states", len(lazy.prevIDs))
		}
		a, b := snaps[0], snaps[1]
		if len(a.Programs) != len(b.Programs) {
			t.Fatalf("scan %d: %d programs, %d", scan, len(a.Programs), len(b.Programs))
		}
		for i := range a.Programs {
			if x, y := a.Programs[i], b.Programs[i]; x.ID != y.ID || x.Delta != y.Delta || x.New != y.New {
				t.Errorf("scan %d: program %d delta %+v new %v, kept states give %+v %v", scan, x.ID, x.Delta, x.New, y.Delta, y.New)
			}
		}
		if !reflect.DeepEqual(a.AttachTypes, b.AttachTypes) {
			t.Errorf("scan %d: attach types differ", scan)
		}
	}
}

func TestAggregateAttachTypes(t *testing.T) {
	m := func(v uint64) *uint64 { return &v }
	progs := []*ProgramStat{
		{Program: Program{ID: 1, AttachType: "fentry", RunCount: 10, RunTimeNs: 100, RecursionMisses: m(1)}, Delta: Rates{Runs: 4, RunTimeNs: 40, Misses: 1}},
		{Program: Program{ID: 2, AttachType: "fentry", RunCount: 20, RunTimeNs: 300, RecursionMisses: m(2)}, Delta: Rates{Runs: 6, RunTimeNs: 60}},
		{Program: Program{ID: 3, AttachType: "kprobe", RunCount: 5, Links: []Link{{Missed: m(9)}, {Missed: m(1)}}}, Delta: Rates{Runs: 5, LinkMissed: 3}},
		{Program: Program{ID: 4, AttachType: Unattached, RecursionMisses: nil}},
	}
	ref := refAttachTypes(progs, time.Second, map[string]float64{"fentry": 12.5})
	ov := 12.5
	got := fromScratch(progs).attachTypes(time.Second, map[string]*float64{"fentry": &ov})
	if !reflect.DeepEqual(got, ref) {
		t.Errorf("aggregates give %s, the reference %s", asJSON(got), asJSON(ref))
	}
	if len(got) != 3 {
		t.Fatalf("got %d attach types, want 3: %+v", len(got), got)
	}
	f := got[0]
	if f.AttachType != "fentry" || f.Programs != 2 || f.RunCount != 30 || f.RunTimeNs != 400 || f.RecursionMisses == nil || *f.RecursionMisses != 3 ||
		f.Delta.Runs != 10 || f.Delta.RunTimeNs != 100 || f.Delta.NsPerRun != 10 || f.Delta.Misses != 1 || f.OverheadNs == nil || *f.OverheadNs != 12.5 {
		t.Errorf("fentry = %+v", f)
	}
	k := got[1]
	if k.AttachType != "kprobe" || k.LinkMissed != 10 || k.Delta.LinkMissed != 3 || k.Delta.MissesPerSec != 3 || k.OverheadNs != nil {
		t.Errorf("kprobe = %+v", k)
	}
	if got[2].AttachType != Unattached || got[2].Programs != 1 {
		t.Errorf("unattached = %+v", got[2])
	}
}

func TestAggregateOwners(t *testing.T) {
	progs := []*ProgramStat{
		{Program: Program{ID: 1, RunCount: 10, Owners: []Owner{{PID: 7, Comm: "cilium-agent", ContainerID: "abc"}, {PID: 8, ContainerID: "abc"}}}, Delta: Rates{RunTimeNs: 10}},
		{Program: Program{ID: 2, RunCount: 5, Owners: []Owner{{PID: 9, Comm: "bpftrace"}}}, Delta: Rates{RunTimeNs: 50}},
		{Program: Program{ID: 3, RunCount: 1, Owners: []Owner{{PID: 7, ContainerID: "abc"}}}, Delta: Rates{RunTimeNs: 5}},
		{Program: Program{ID: 4}},
	}
	got := fromScratch(progs).owners(progs, time.Second)
	if ref := refOwners(progs, time.Second); !reflect.DeepEqual(got, ref) {
		t.Errorf("aggregates give %s, the reference %s", asJSON(got), asJSON(ref))
	}
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	if got[0].Key != "pid:9" || got[0].Comm != "bpftrace" || got[0].Delta.RunTimeNs != 50 {
		t.Errorf("first owner (most run time) = %+v", got[0])
	}
	c := got[1]
	if c.Key != "abc" || c.RunCount != 11 || len(c.ProgramIDs) != 2 || c.Delta.RunTimeNs != 15 {
		t.Errorf("container owner (two pids, one count per program) = %+v", c)
	}
}

// TestAggregateMissesAbsent: an aggregate's recursion_misses is nil where
// none of its programs has the counter (bpf_prog_info before Linux 5.12),
// else the sum of those that have it, a known 0 included; kept that way
// incrementally, for the attach type and the owner alike, as programs
// come, go and miss between scans.
func TestAggregateMissesAbsent(t *testing.T) {
	m := func(v uint64) *uint64 { return &v }
	type loaded struct {
		id     uint32
		misses *uint64
	}
	type scan struct {
		progs []loaded
		want  *uint64 // the fentry type's and the owner's
	}
	for _, tc := range []struct {
		name  string
		scans []scan
	}{
		{"none has the counter (5.10)", []scan{{[]loaded{{1, nil}, {2, nil}}, nil}}},
		{"every one has it", []scan{{[]loaded{{1, m(3)}, {2, m(4)}}, m(7)}}},
		{"a known zero", []scan{{[]loaded{{1, m(0)}}, m(0)}}},
		{"some have it", []scan{{[]loaded{{1, nil}, {2, m(5)}}, m(5)}}},
		{"programs come, miss and go", []scan{
			{[]loaded{{1, nil}}, nil},
			{[]loaded{{1, nil}, {2, m(4)}}, m(4)},
			{[]loaded{{1, nil}, {2, m(6)}}, m(6)}, // counters only: the owner's sums move
			{[]loaded{{1, nil}}, nil},             // the last with the counter went
			{[]loaded{{1, nil}, {3, m(0)}}, m(0)},
			{[]loaded{{3, m(2)}}, m(2)},
			{[]loaded{{4, nil}}, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &aggregates{}
			prev := map[uint32]*ProgramStat{}
			for i, sc := range tc.scans {
				g.begin()
				var entries []*ProgramStat
				cur := map[uint32]*ProgramStat{}
				for _, p := range sc.progs {
					old := prev[p.id]
					e := old
					if old == nil || !prog.SameValue(old.RecursionMisses, p.misses) {
						e = &ProgramStat{Program: Program{ID: p.id, AttachType: "fentry", RecursionMisses: p.misses,
							Owners: []Owner{{PID: 7, Comm: "loader"}}}}
						g.replace(old, e)
					}
					entries = append(entries, e)
					cur[p.id] = e
				}
				for id, old := range prev {
					if cur[id] == nil {
						g.replace(old, nil)
					}
				}
				prev = cur
				types, owners := g.attachTypes(time.Second, nil), g.owners(entries, time.Second)
				if len(types) != 1 || len(owners) != 1 {
					t.Fatalf("scan %d: %d attach types, %d owners; want one each", i, len(types), len(owners))
				}
				if got, want := asJSON(types[0].RecursionMisses), asJSON(sc.want); got != want {
					t.Errorf("scan %d: the attach type's recursion_misses %s, want %s", i, got, want)
				}
				if got, want := asJSON(owners[0].RecursionMisses), asJSON(sc.want); got != want {
					t.Errorf("scan %d: the owner's recursion_misses %s, want %s", i, got, want)
				}
				if !reflect.DeepEqual(types, refAttachTypes(entries, time.Second, nil)) || !reflect.DeepEqual(owners, refOwners(entries, time.Second)) {
					t.Errorf("scan %d: aggregates %s %s differ from the sums from scratch", i, asJSON(types), asJSON(owners))
				}
			}
		})
	}
}

// asJSON is v as the API writes it: an absent count null, not an address.
func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v (%v)", v, err)
	}
	return string(b)
}
