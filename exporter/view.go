package exporter

import (
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// view is what the metric callback reads: one snapshot reduced to the
// series of the configured level, attribute sets already built. It is
// built once per snapshot in Update and never mutated afterwards, so a
// collection never races with a scan — except workloads, the exporter's
// own series, which the next Update changes: they are read with e.mu
// held (series.go), with the view that Update made.
type view struct {
	// at is the clock's time at the Update that built it (stamp).
	at        time.Time
	programs  []programSeries
	links     []linkSeries
	workloads []*workloadSeries
	info      []attribute.Set
	owners    []aggSeries
	attach    []aggSeries
	// missesKnown: some attach type's recursion_misses is known (some
	// program's is). Where the kernel counts none (5.10), no aggregate
	// has a misses series: a 0 would be a figure the kernel never gave.
	// One flag for the node, not one per aggregate: a kernel has the
	// counter for every program or for none, and an aggregate's series
	// is cumulative since the exporter started.
	missesKnown bool

	programsSeen, linksSeen int
	dropped                 int
	// overflowed is the series over the cardinality limit at
	// the latest export; spansDropped the spans over the budget so far.
	overflowed, spansDropped int64
	shutdown                 bool
	statsEnabled, statsHeld  bool
	scans, scanErrors        int64
	stats                    statsView
	profiles                 []profileSeries
	scanSource               attribute.Set
	// missWatch: the miss watcher's state (Snapshot.MissWatch).
	missWatch agent.MissWatch

	// Memory and maps (memory.go): the node's totals at every level; per
	// map key at the program and workload levels; bpf.*.memory per
	// program, workload key or owner; verified instructions per program
	// or key.
	node   nodeMemory
	maps   []mapSeries
	memory []valueSeries
	insns  []valueSeries
}

// statsView is what the stats-mode and stats-tax metrics read.
type statsView struct {
	mode     agent.StatsMode
	counts   string // agent.StatsState.Counts
	agentCPU float64
	tax      agent.StatsTax
	costs    []agent.StatsCost
}

func newStatsView(s *agent.Snapshot) statsView {
	return statsView{mode: s.Stats.Mode, counts: s.Stats.Counts, agentCPU: s.AgentCPUShare, tax: s.StatsTax, costs: s.StatsCosts}
}

type programSeries struct {
	attrs attribute.Set
	// start is the program's load time: its counters count from it.
	start     time.Time
	runs      uint64
	runTimeNs uint64
	misses    *uint64
	// causes: *misses by cause (agent.ProgramCauses), with their sets.
	causes    agent.MissCauses
	causeSets *causeSets
}

// linkSeries is one link's bpf.link.missed for one reason.
type linkSeries struct {
	attrs  attribute.Set
	start  time.Time
	missed uint64
}

// appendLinkSeries adds l's bpf.link.missed series: nesting and maxactive
// where the agent knows the split, unknown (the whole sum) where it does
// not, so the series of a link add up to the kernel's missed. A link
// without missed has none.
func appendLinkSeries(out []linkSeries, l *agent.Link, attrs []attribute.KeyValue, start time.Time) []linkSeries {
	by, ok := agent.LinkMissedOf(l)
	if !ok {
		return out
	}
	reasons := []string{agent.LinkMissUnknown}
	if l.MissedNesting != nil && l.MissedMaxactive != nil {
		reasons = []string{agent.LinkMissNesting, agent.LinkMissMaxactive}
	}
	for _, r := range reasons {
		kv := append([]attribute.KeyValue{attribute.Int64(attrLinkID, int64(l.ID)), attribute.String(attrLinkType, l.Type),
			attribute.String(attrLinkMissReason, r)}, attrs...)
		out = append(out, linkSeries{attrs: attribute.NewSet(kv...), start: start, missed: by.Get(r)})
	}
	return out
}

// aggSeries is an aggregate (owner or attach type) whose counters are the
// sum of the snapshots' interval deltas since the exporter started: summing
// the programs' cumulative counters instead would go down whenever a
// program unloads, which a backend reads as a counter reset.
type aggSeries struct {
	attrs    attribute.Set
	acc      accumulator
	programs int
	overhead *float64 // seconds; attach types only
	// memSets: attrs with each bpf.memory.kind; owners only (memory.go).
	memSets [2]attribute.Set
	// causes: attrs with each cause of acc.causes (causes.go).
	causes *causeSets
}

type accumulator struct {
	runs, runTimeNs, misses, linkMissed uint64
	// linkBy is linkMissed by reason (the workload level's
	// bpf.link.missed series).
	linkBy agent.LinkMisses
	// causes are misses by cause, adding up to misses.
	causes agent.MissCauses
}

// add adds an interval's rates, its misses by cause fitted to the
// explained causes of the aggregate's programs.
func (a *accumulator) add(r agent.Rates, explained agent.MissCauses) {
	a.runs += r.Runs
	a.runTimeNs += r.RunTimeNs
	a.misses += r.Misses
	a.linkMissed += r.LinkMissed
	a.linkBy.Add(r.LinkMissedBy)
	a.causes.Plus(agent.FitCauses(explained, r.Misses))
}

// programKey identifies a program's attribute set: the identity never
// changes for an id, the owner may.
type programKey struct {
	owner agent.Owner
	at    string
	tgt   string
}

type cachedAttrs struct {
	key   programKey
	attrs []attribute.KeyValue
	set   attribute.Set
	// memSets: set with each bpf.memory.kind, made on first use.
	memSets [2]attribute.Set
	// causes: set with each miss cause, made when the cause first counts.
	causes *causeSets
}

// primaryOwner picks the owner the program's series carry: a process that
// holds the program's own fd before one that holds only a link.
func primaryOwner(p *agent.Program) agent.Owner {
	for _, o := range p.Owners {
		if o.Via == "fd" {
			return o
		}
	}
	if len(p.Owners) > 0 {
		return p.Owners[0]
	}
	return agent.Owner{}
}

// appendOwnerIDs appends what identifies a program's primary owner (its
// pid, container and pod, where known) to kv: a span's and a program info
// series' attributes.
func appendOwnerIDs(kv []attribute.KeyValue, p *agent.Program) []attribute.KeyValue {
	o := primaryOwner(p)
	if o.PID > 0 {
		kv = append(kv, attribute.Int(attrProcessPID, o.PID))
	}
	if o.ContainerID != "" {
		kv = append(kv, attribute.String(attrContainerID, o.ContainerID))
	}
	if o.PodName != "" {
		kv = append(kv, attribute.String(attrK8sPodName, o.PodName))
	}
	return kv
}

func ownerKVs(kv []attribute.KeyValue, pid int, comm, exe, container, pod, ns string) []attribute.KeyValue {
	if pid > 0 {
		kv = append(kv, attribute.Int(attrProcessPID, pid))
	}
	if name := exeName(comm, exe); name != "" {
		kv = append(kv, attribute.String(attrProcessExecutableName, name))
	}
	if container != "" {
		kv = append(kv, attribute.String(attrContainerID, container))
	}
	if pod != "" {
		kv = append(kv, attribute.String(attrK8sPodName, pod))
	}
	if ns != "" {
		kv = append(kv, attribute.String(attrK8sNamespaceName, ns))
	}
	return kv
}

// identityKVs are the attributes naming a program, shared by metrics and
// episode spans.
func identityKVs(kv []attribute.KeyValue, id uint32, name, tag, typ, at, target string, sleepable *bool) []attribute.KeyValue {
	kv = append(kv,
		attribute.Int64(attrProgramID, int64(id)),
		attribute.String(attrProgramName, name),
		attribute.String(attrProgramTag, tag),
		attribute.String(attrProgramType, typ),
		attribute.String(attrAttachType, at),
	)
	if target != "" {
		kv = append(kv, attribute.String(attrAttachTarget, target))
	}
	if sleepable != nil {
		kv = append(kv, attribute.Bool(attrProgramSleepable, *sleepable))
	}
	return kv
}

func (e *Exporter) programAttrs(p *agent.Program) cachedAttrs {
	k := programKey{owner: primaryOwner(p), at: p.AttachType, tgt: p.AttachTarget}
	// Owner has no slices, so the key compares with ==.
	if c, ok := e.progCache[p.ID]; ok && c.key == k {
		return c
	}
	kv := identityKVs(nil, p.ID, p.Name, p.Tag, p.Type, p.AttachType, p.AttachTarget, p.Sleepable)
	if p.MissKind != "" {
		kv = append(kv, attribute.String(attrMissKind, p.MissKind))
	}
	o := k.owner
	kv = ownerKVs(kv, o.PID, o.Comm, o.Exe, o.ContainerID, o.PodName, o.PodNamespace)
	// The workload too, so rules can sum by the same keys at both levels.
	if o.WorkloadKind != "" {
		kv = append(kv, attribute.String(attrK8sWorkloadKind, o.WorkloadKind), attribute.String(attrK8sWorkloadName, o.WorkloadName))
	}
	c := cachedAttrs{key: k, attrs: kv, set: attribute.NewSet(kv...), causes: &causeSets{}}
	e.progCache[p.ID] = c
	return c
}

// selectPrograms returns the indexes of the programs to export, at most max
// (0: all). Programs that ever missed come first, then the most expensive by
// cumulative run time, then the lowest id: an order that changes rarely, so
// the exported set does not churn from one interval to the next.
func selectPrograms(progs []*agent.ProgramStat, max int) []int {
	idx := make([]int, len(progs))
	for i := range idx {
		idx[i] = i
	}
	if max <= 0 || len(progs) <= max {
		return idx
	}
	missed := func(p *agent.ProgramStat) bool {
		if p.RecursionMisses != nil && *p.RecursionMisses > 0 {
			return true
		}
		for _, l := range p.Links {
			if l.Missed != nil && *l.Missed > 0 {
				return true
			}
		}
		return false
	}
	sort.Slice(idx, func(a, b int) bool {
		pa, pb := progs[idx[a]], progs[idx[b]]
		ma, mb := missed(pa), missed(pb)
		if ma != mb {
			return ma
		}
		if pa.RunTimeNs != pb.RunTimeNs {
			return pa.RunTimeNs > pb.RunTimeNs
		}
		return pa.ID < pb.ID
	})
	idx = idx[:max]
	sort.Ints(idx)
	return idx
}

// buildView reduces a snapshot to the configured level. Called with e.mu held.
func (e *Exporter) buildView(s *agent.Snapshot, now time.Time) *view {
	v := &view{
		programsSeen: len(s.Programs),
		linksSeen:    s.Scan.Links,
		statsEnabled: s.Stats.Enabled,
		statsHeld:    s.Stats.HeldByAgent,
		scans:        e.scans,
		scanErrors:   e.scanErrors,
		stats:        newStatsView(s),
		profiles:     e.profileSeries(s),
		missWatch:    s.MissWatch,
		scanSource: attribute.NewSet(attribute.String(attrScanSource, s.Scan.Source),
			attribute.String(attrScanFallbackReason, s.Scan.FallbackReason)),
	}

	byID, seen := e.maps.index(s, v)
	if byID != nil && (e.cfg.Level == LevelProgram || e.cfg.Level == LevelWorkload) {
		e.buildMaps(s, v, seen, e.view)
	}

	if e.cfg.Level == LevelProgram {
		sel := selectPrograms(s.Programs, e.cfg.MaxPrograms)
		v.dropped = len(s.Programs) - len(sel)
		v.programs = make([]programSeries, 0, len(sel))
		v.memory = make([]valueSeries, 0, memorySeriesPer(v)*len(sel))
		for _, i := range sel {
			p := &s.Programs[i].Program
			c := e.programAttrs(p)
			ps := programSeries{attrs: c.set, start: p.LoadTime, runs: p.RunCount, runTimeNs: p.RunTimeNs, misses: p.RecursionMisses}
			if p.RecursionMisses != nil {
				ps.causes, ps.causeSets = agent.ProgramCauses(s.Programs[i]), c.causes
				c.causes.ensure(&ps.causes, c.attrs)
			}
			v.programs = append(v.programs, ps)
			e.programMemory(v, c, p, byID)
			for i := range p.Links {
				v.links = appendLinkSeries(v.links, &p.Links[i], c.attrs, p.LoadTime)
			}
		}
		// Forget programs no longer exported so the cache stays bounded.
		// Every exported program is cached now: with no more entries than
		// them, none is stale (most scans), and no set is built.
		if len(e.progCache) > len(sel) {
			seen := make(map[uint32]bool, len(sel))
			for _, i := range sel {
				seen[s.Programs[i].ID] = true
			}
			for id := range e.progCache {
				if !seen[id] {
					delete(e.progCache, id)
				}
			}
		}
	}

	if e.cfg.Level == LevelWorkload {
		e.buildWorkloads(s, v, now)
		e.workloadMemory(v, byID, seen, e.view)
	}

	ic := newIntervalCauses(s)
	v.missesKnown = slices.ContainsFunc(s.AttachTypes, func(a agent.AttachTypeStat) bool { return a.RecursionMisses != nil })
	if e.cfg.Level == LevelOwner {
		live := make(map[string]bool, len(s.Owners))
		for i := range s.Owners {
			o := &s.Owners[i]
			live[o.Key] = true
			a := e.owners[o.Key]
			if a == nil {
				kv := ownerKVs([]attribute.KeyValue{attribute.String(attrOwnerKey, o.Key)}, o.PID, o.Comm, "", o.ContainerID, o.PodName, o.Namespace)
				a = &aggSeries{attrs: attribute.NewSet(kv...), causes: &causeSets{}}
				e.owners[o.Key] = a
			}
			a.acc.add(o.Delta, ic.owner(o.ProgramIDs))
			a.causes.ensure(&a.acc.causes, a.attrs.ToSlice())
			a.programs = len(o.ProgramIDs)
			v.owners = append(v.owners, *a)
		}
		e.ownerMemory(s, v, byID)
		for k := range e.owners {
			if !live[k] {
				delete(e.owners, k)
			}
		}
	}

	overhead := make(map[string]float64, len(s.Calibration))
	for _, c := range s.Calibration {
		if c.Supported {
			overhead[c.AttachType] = c.OverheadNs / 1e9
		}
	}
	seenAT := make(map[string]bool, len(s.AttachTypes))
	for i := range s.AttachTypes {
		at := &s.AttachTypes[i]
		seenAT[at.AttachType] = true
		a := e.attach[at.AttachType]
		if a == nil {
			a = &aggSeries{attrs: attribute.NewSet(attribute.String(attrAttachType, at.AttachType)), causes: &causeSets{}}
			e.attach[at.AttachType] = a
		}
		a.acc.add(at.Delta, ic.byAttach[at.AttachType])
		a.causes.ensure(&a.acc.causes, a.attrs.ToSlice())
		a.programs = at.Programs
		a.overhead = nil
		if o, ok := overhead[at.AttachType]; ok {
			a.overhead = &o
		} else if at.OverheadNs != nil {
			o := *at.OverheadNs / 1e9
			a.overhead = &o
		}
	}
	// An attach type with no program loaded now keeps its counters (they
	// are cumulative since the agent started) and reports zero programs;
	// calibrated types without programs still report their overhead.
	for name, o := range overhead {
		if !seenAT[name] {
			a := e.attach[name]
			if a == nil {
				a = &aggSeries{attrs: attribute.NewSet(attribute.String(attrAttachType, name)), causes: &causeSets{}}
				a.causes.ensure(&a.acc.causes, a.attrs.ToSlice())
				e.attach[name] = a
			}
			seenAT[name] = true
			o := o
			a.overhead = &o
		}
	}
	names := make([]string, 0, len(e.attach))
	for name, a := range e.attach {
		if !seenAT[name] {
			a.programs = 0
			a.overhead = nil
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v.attach = append(v.attach, *e.attach[name])
	}
	return v
}
