package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/bpfsys"
	"github.com/bpfleet/bpfleet/agent/owners"
)

// Config is the agent's configuration. The zero value is usable: defaults
// are filled in by New.
type Config struct {
	// EnableStats turns run-time stats on with BPF_ENABLE_STATS for the
	// agent's lifetime (the fd is held, the sysctl is never written).
	EnableStats bool
	// StatsMode is always, sampled or off (see StatsAlways...). Empty:
	// always when EnableStats, else the agent leaves stats alone.
	StatsMode StatsMode
	// StatsWindow of every StatsPeriod is when sampled mode holds stats on
	// (defaults config.DefaultStatsWindow, config.DefaultStatsPeriod).
	StatsWindow, StatsPeriod time.Duration
	// Profile selects programs to profile with fentry/fexit
	// (probes/profiler): id:N, name:S, tag:S, attach:S, owner:S or a bare
	// word matching any of them.
	Profile []string
	// ProfileWindow of every ProfilePeriod is when profiled programs are
	// timed (runs are counted always); zero: every run timed.
	ProfileWindow, ProfilePeriod time.Duration
	// QuietIntervals is how many consecutive scans without new misses close
	// a miss episode. Default 2.
	QuietIntervals int
	// Owners enables owner attribution through /proc.
	Owners bool
	// OwnerRefresh is how often owners are re-read from /proc even when no
	// new program appeared. Default 30s, and ownerStablePeriod while every
	// owner process is watched through a pidfd (an owner's exit then
	// triggers the refresh; see ownerwatch.go).
	OwnerRefresh time.Duration
	// ProcRoot is where procfs is mounted (a DaemonSet mounts the host's
	// /proc elsewhere). Default /proc.
	ProcRoot string
	// BPFFS lists bpffs mount points searched for pins. Default /sys/fs/bpf.
	BPFFS []string
	// Now is the clock; tests inject one. Default time.Now.
	Now func() time.Time
	// OwnerIterator finds owners with the task_file iterator instead of a
	// /proc walk: one read() for every process, but loading it costs a
	// kernel BTF parse (tens of ms), so only long-running commands want it.
	OwnerIterator bool
	// NoIterator disables the bpf_prog iterators: the scan source
	// (probes/progstats) and the facts one (probes/progiter) that tells
	// sleepable programs and expected attach types.
	NoIterator bool
	// ScanSource is ScanSourceIterator, ScanSourceSyscall or "auto"
	// (empty): the iterator where the kernel loads it, unless OneShot.
	ScanSource string
	// OneShot says the agent scans once and exits (list without
	// --watch). Loading the iterator costs more than the one syscall scan
	// it would replace, so it reads the iterators a running agent pinned
	// in BPFFS (scan_pin.go) and, without them, "auto" scans by syscall
	// and finds owners by the /proc walk.
	OneShot bool
	// Parallel is how many goroutines read programs seen for the first
	// time (default 1). One-shot commands set it to the CPU count; the
	// long-running agent keeps one, since after its first scan nearly
	// everything is cached.
	Parallel int
}

// Scanner is what the exporter, the API and the TUI need from the agent.
type Scanner interface {
	// Scan reads the kernel once and returns the snapshot of the interval
	// since the previous scan.
	Scan(ctx context.Context) (*Snapshot, error)
	// Close releases the stats fd and returns every miss episode still
	// open, ended with Reason "shutdown".
	Close() []Episode
}

// Agent reads the kernel's BPF programs and turns successive reads into
// snapshots. Its methods are safe for concurrent use; scans are serialised.
type Agent struct {
	mu     sync.Mutex
	cfg    Config
	r      *reader
	stats  *statsCtl
	smp    *sampler  // sampled mode only
	prof   *profiles // with Config.Profile only
	kernel KernelInfo
	eps    *episodeTracker

	seq      uint64
	prevTime time.Time
	// prevIDs (ascending) and prevS are the previous scan's programs:
	// their counters and entries; spareIDs and spareS are the buffers the
	// next scan fills.
	prevIDs, spareIDs []uint32
	prevS, spareS     []progState
	prevLink          map[uint32]uint64 // kprobe missed by link id
	// pendingStates are the entries of a one-shot scan, to become prevIDs
	// and prevS if the agent scans again (statesFromEntries).
	pendingStates []*ProgramStat
	// lastEntries is the last snapshot's Programs; lastInOrder says the
	// last scan's programs came in ascending id order (as prevIDs).
	lastEntries []*ProgramStat
	lastInOrder bool
	// agg keeps the aggregates between scans (aggregates.go).
	agg aggregates
	// sysctl reads kernel.bpf_stats_enabled at every scan.
	sysctl *sysctlReader
	// overheads is the calibration's overhead per attach type, built
	// once per SetCalibration (nil: not built yet).
	overheads map[string]*float64

	attr     *attribution // nil without Config.Owners
	ownersAt time.Time
	// ownerSlow: OwnerRefresh was not set, so the period stretches to
	// ownerStablePeriod while the owners are watched, except until
	// ownerFastUntil (an owner just exited: its successor may open the
	// programs a little later).
	ownerSlow      bool
	ownerFastUntil time.Time
	ownerKnown     map[uint32]bool
	// ownerAllKnown: every program of the last scan is in ownerKnown.
	ownerAllKnown bool
	maxProgID     uint32 // the highest program id of the last scan

	calibration []Calibration
	// caps names the capabilities the agent uses and lacks (degraded.go).
	caps       string
	statsCosts []StatsCost
	prevCPU    time.Duration
	closed     bool
}

var _ Scanner = (*Agent)(nil)

// New prepares an agent. It fails only when the kernel refuses to list BPF
// programs at all; a missing optional capability (stats, iterator, owners)
// is reported in the snapshots instead.
func New(cfg Config) (*Agent, error) {
	if cfg.QuietIntervals <= 0 {
		cfg.QuietIntervals = 2
	}
	ownerSlow := cfg.OwnerRefresh <= 0
	if cfg.OwnerRefresh <= 0 {
		cfg.OwnerRefresh = 30 * time.Second
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if len(cfg.BPFFS) == 0 {
		cfg.BPFFS = []string{"/sys/fs/bpf"}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Agent{
		cfg:        cfg,
		r:          newReader(),
		kernel:     ReadKernelInfo(cfg.ProcRoot),
		eps:        newEpisodeTracker(cfg.QuietIntervals),
		ownerKnown: map[uint32]bool{},
		sysctl:     newSysctlReader(cfg.ProcRoot),
		caps:       missingCaps(),
	}
	a.r.parallel = cfg.Parallel
	a.r.oneShot = cfg.OneShot
	a.r.targets.netns = owners.HostNetns(cfg.ProcRoot)
	if !cfg.NoIterator {
		a.r.loadFacts = loadProgIter
	}
	if _, _, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, 0); err != nil {
		return nil, fmt.Errorf("%w (%v)", errPrivilege, err)
	}
	if cfg.StatsMode == "" && cfg.EnableStats {
		cfg.StatsMode = StatsAlways
	}
	if cfg.StatsMode != "" {
		if !cfg.StatsMode.Valid() {
			return nil, fmt.Errorf("stats mode %q: want always, sampled or off", cfg.StatsMode)
		}
		a.stats = newStatsCtl(cfg.StatsMode, cfg.StatsWindow, cfg.StatsPeriod, cfg.Now)
		if cfg.StatsMode == StatsSampled {
			a.smp = newSampler(a.stats.window)
		}
		a.cfg.StatsMode = cfg.StatsMode
	}
	a.prevCPU = processCPU()
	if len(cfg.Profile) > 0 {
		a.prof = newProfiles(cfg.Profile, cfg.ProfileWindow, cfg.ProfilePeriod)
	}
	// The scan source is chosen once per kernel, here (after every
	// check that can fail New, so nothing leaks): the iterator when
	// this kernel loads it (its first read is checked before use), else
	// the syscall path with the reason in every snapshot.
	switch {
	case cfg.NoIterator:
		a.r.fallback = "iterator disabled by configuration"
	case cfg.ScanSource == ScanSourceSyscall:
		a.r.fallback = "syscall source chosen by configuration"
	case cfg.OneShot:
		// A running agent's pinned iterator costs one open; loading one
		// costs more than the syscall scan it would replace.
		var why string
		if a.r.iter, a.r.pin, why = openPinnedStatsIter(cfg.BPFFS); a.r.iter != nil {
			break
		}
		if cfg.ScanSource == ScanSourceIterator {
			a.r.iter, a.r.fallback = loadStatsIter()
			break
		}
		a.r.fallback = "one scan, no pinned iterator (" + why + "): loading one costs more than the syscall scan it replaces"
	default:
		a.r.iter, a.r.fallback = loadStatsIter()
	}
	if cfg.Owners {
		a.attr = newAttribution(cfg)
		a.ownerSlow = ownerSlow
	}
	return a, nil
}

// Kernel returns the node's kernel description.
func (a *Agent) Kernel() KernelInfo { return a.kernel }

// OwnerFiller completes owners with what the kernel does not know: pod
// and container names from the Kubernetes API (agent/kube). A filler whose
// answers change over time (a pod cache) should also have a method
// Generation() uint64 that changes whenever they may have: while it stays
// the same, an owner refresh fills only owners it has not filled before.
// Without it every owner is filled again at every refresh.
type OwnerFiller interface {
	Fill(*Owner)
}

// SetOwnerFiller plugs in an OwnerFiller, applied whenever owners are
// re-read.
func (a *Agent) SetOwnerFiller(f OwnerFiller) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attr != nil {
		a.attr.setFiller(f)
	}
}

// SetCalibration records the agent's own per-attach-type overhead
// measurements, carried in every later snapshot.
func (a *Agent) SetCalibration(c []Calibration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calibration = append([]Calibration(nil), c...)
	a.overheads = nil
}

// ErrClosed is returned by Scan after Close.
var ErrClosed = errors.New("agent closed")

// Scan reads every program and link once and returns the snapshot.
func (a *Agent) Scan(ctx context.Context) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	start := a.cfg.Now()
	// An owner refresh that is due whatever programs are found (the first
	// scan, the refresh period) reads the holders while the programs are
	// read: both are syscall-bound walks, and a one-shot list would
	// otherwise wait for their sum.
	var early *earlyHolders
	if a.attr != nil && a.ownerRefreshDue(start) {
		early = &earlyHolders{c: make(chan holders, 1), horizon: a.maxProgID}
		go func() { early.c <- a.attr.readHolders() }()
	}
	progs, st, err := a.r.readView(start)
	if err != nil {
		if early != nil {
			<-early.c // the walk must not outlive the scan
		}
		return nil, err
	}
	now := a.cfg.Now()
	var dt time.Duration
	if !a.prevTime.IsZero() {
		dt = now.Sub(a.prevTime)
	}

	st.OwnersRefreshed = a.attachOwners(progs, now, &st, early)
	if a.attr != nil && st.OwnersRefreshed {
		st.OwnersPin = a.attr.pin
	}

	snap := &Snapshot{
		Seq:      a.seq + 1,
		Time:     now,
		Interval: dt,
		Kernel:   a.kernel,
		Stats:    a.stats.state(a.sysctl.read()),
		Degraded: a.degraded(),
	}
	// Sampled mode scales run counts from the windows; where another
	// holder kept stats on throughout, the kernel's counts are exact and
	// added as they are.
	if a.smp != nil {
		snap.Stats.Counts = a.smp.begin(a.stats.coverage(a.smp.buf), a.prevTime)
	}
	cpu := processCPU()
	if dt > 0 {
		snap.AgentCPUShare = float64(cpu-a.prevCPU) / float64(dt)
	}
	a.prevCPU = cpu
	// Joins kept by the reader and no owner refresh: a program whose
	// counters did not move is the same as in the last scan.
	a.assemble(snap, progs, dt, a.smp, a.r.joinsKept && !st.OwnersRefreshed)

	st.Duration = a.cfg.Now().Sub(start)
	snap.Scan = st
	a.prevTime = now
	if n := progs.len(); n > 0 {
		a.maxProgID = progs.at(n - 1).ID // read in id order
	}
	a.seq++
	return snap, nil
}

// assemble turns one read's programs into snap's programs, episodes and
// aggregates (snap's Time, Interval and Stats set). It is the pure half of
// Scan: nothing here reads the kernel.
//
// A program whose counters, joins and owners are what they were and whose
// interval was idle (zero delta) keeps the entry the previous snapshot
// handed out: snapshots share it, and nothing ever writes an entry once it
// is handed out (the API's history keeps old snapshots). Only a program that
// changed gets a new entry, and the aggregates (attach types, owners, stats
// tax) are updated by the changed entries alone (aggregates.go): on a node
// whose programs are mostly idle a scan costs the Go side little more than a
// comparison per program.
//
// joinsKept says each program's joins, owners and miss kind are what they
// were in the last scan (reader.joinsKept): then a program whose counters
// did not move is known unchanged without comparing it.
func (a *Agent) assemble(snap *Snapshot, progs progView, dt time.Duration, smp *sampler, joinsKept bool) {
	now := snap.Time
	n := progs.len()
	a.statesFromEntries()
	// A one-shot read's first scan keeps no states: the agent scans once
	// (Config.OneShot). Should it scan again, its entries are the states.
	lazy := progs.stats != nil && len(a.prevIDs) == 0
	fast := joinsKept && smp == nil
	// The same programs in the same order as the last scan (the reader
	// kept every slot, the last scan's were in id order): their states are
	// updated where they stand, and while no entry changes the last
	// snapshot's list of entries is handed out again.
	// (Not with profiles: their entries are copied on write, which needs
	// the last scan's states as they were.)
	inPlace := fast && a.prof == nil && a.lastInOrder && len(a.prevIDs) == n && len(a.lastEntries) == n && sameIDs(a.prevIDs, progs)
	var entries []*ProgramStat
	if !inPlace {
		entries = make([]*ProgramStat, n)
	}
	// Counters and entries of the previous scan, by ascending id as
	// programs come (both sources read in id order): each program's
	// previous counters are found by a merge, and this scan's are kept in
	// the spare buffers.
	before := idCursor{ids: a.prevIDs}
	nextIDs, nextS := a.spareIDs[:0], a.spareS[:0]
	switch {
	case inPlace:
		nextIDs, nextS = a.prevIDs, a.prevS
	case !lazy && cap(nextIDs) < n: // sized once rather than grown by appends
		nextIDs, nextS = make([]uint32, 0, n), make([]progState, 0, n)
	}
	g := &a.agg
	g.begin()
	var obs []missObservation
	matched := 0
	for i := range n {
		p := progs.at(i)
		cur := progCounters(p)
		var prevC counters
		var old *ProgramStat
		j, havePrev := i, true
		if !inPlace {
			j, havePrev = before.find(p.ID)
		}
		if havePrev {
			ps := &a.prevS[j]
			prevC, old = ps.c, ps.e
			matched++
			// Decided from the state alone: the entries are all over
			// the heap, the states side by side.
			if fast && cur == prevC && ps.quiet && ps.hasMisses == (p.RecursionMisses != nil) {
				if !inPlace {
					nextIDs, nextS = append(nextIDs, p.ID), append(nextS, *ps)
				}
				if entries != nil {
					entries[i] = old // idle and unchanged
				}
				continue
			}
		}
		raw := programDelta(cur, prevC, havePrev, p.LoadTime, a.prevTime)
		if smp != nil {
			raw = smp.program(p, raw, dt)
		}
		d := raw // an idle program's rates are all zero: no divisions
		moved := raw != (Rates{})
		if moved {
			d = withRates(raw, dt)
		}
		p.MissKind = missKind(p, &a.kernel)
		var e *ProgramStat
		switch {
		case old != nil && !moved && idle(old) && sameDynamic(p, &old.Program):
			e = old // idle and unchanged: shared with the previous snapshot
		case progs.stats != nil:
			e = &progs.stats[i] // a one-shot scan built it in place
		default:
			e = newEntry(p)
		}
		if e != old {
			e.Delta, e.New = d, !havePrev
		}
		// idle(e), known without reading it: a kept entry is idle, a new
		// one has this delta, New unless seen before, and no profile yet.
		st := progState{c: cur, e: e, quiet: !moved && havePrev, hasMisses: p.RecursionMisses != nil}
		switch {
		case inPlace:
			nextS[i] = st
		case !lazy:
			nextIDs, nextS = append(nextIDs, p.ID), append(nextS, st)
		}
		if entries == nil {
			// The first change of an in-place scan: the entries before
			// it are the last snapshot's.
			entries = make([]*ProgramStat, n)
			copy(entries, a.lastEntries[:i])
		}
		entries[i] = e
		if e == old {
			continue
		}
		g.replace(old, e)
		if d.Misses > 0 {
			obs = append(obs, missObservation{key: episodeKey{SourceRecursionMisses, p.ID, 0}, misses: d.Misses, runs: d.Runs, prog: &e.Program, kind: e.MissKind})
		}
		if len(e.Links) > 0 || old != nil && len(old.Links) > 0 {
			obs = a.linkMisses(obs, old, e)
		}
	}
	if entries == nil {
		entries = a.lastEntries // nothing changed, nothing moved
	}
	if !inPlace {
		a.lastInOrder = slices.IsSorted(nextIDs)
		sortByID(nextIDs, nextS)
	}
	next := idCursor{ids: nextIDs}
	if matched < len(a.prevIDs) {
		// Programs gone since the last scan leave the aggregates.
		for j, id := range a.prevIDs {
			if old := a.prevS[j].e; !next.has(id) {
				g.replace(old, nil)
				a.linkMisses(nil, old, nil)
			}
		}
	}
	present := func(k episodeKey) bool { return next.has(k.prog) }
	if smp != nil {
		smp.end(next.has)
	}
	snap.Episodes = a.eps.observe(now, dt, obs, present)

	if a.prof != nil {
		// A profiled program's entry is written: copied first when it is
		// the previous snapshot's.
		a.prof.update(entries, func(i int) *ProgramStat {
			e := entries[i]
			if j, ok := before.find(e.ID); ok && a.prevS[j].e == e {
				c := *e
				entries[i] = &c
				if k, ok := next.find(e.ID); ok {
					nextS[k].e = &c
				}
				g.replace(e, &c)
				e = &c
			}
			return e
		})
		snap.Degraded = append(snap.Degraded, a.prof.errors()...)
		for i := range nextS { // profiles were set after the states
			nextS[i].quiet = idle(nextS[i].e)
		}
	}
	snap.Programs = entries
	snap.AttachTypes = g.attachTypes(dt, a.overhead())
	snap.Owners = g.owners(entries, dt)
	snap.Calibration = append([]Calibration(nil), a.calibration...)
	snap.StatsCosts = append([]StatsCost(nil), a.statsCosts...)
	snap.StatsTax = g.tax(entries, a.statsCosts, snap.Stats, dt, now)
	a.lastEntries = entries
	if lazy {
		a.pendingStates = entries
	}
	if !inPlace {
		a.prevIDs, a.prevS, a.spareIDs, a.spareS = nextIDs, nextS, a.prevIDs, a.prevS
		clear(a.spareS) // the spare buffer must not keep old entries alive
	}
}

// statesFromEntries makes the states of a one-shot scan (pendingStates),
// which keeps none, before a later scan needs them.
func (a *Agent) statesFromEntries() {
	es := a.pendingStates
	if es == nil {
		return
	}
	a.pendingStates = nil
	a.prevIDs, a.prevS = make([]uint32, len(es)), make([]progState, len(es))
	for i, e := range es {
		a.prevIDs[i] = e.ID
		a.prevS[i] = progState{c: progCounters(&e.Program), e: e, quiet: idle(e), hasMisses: e.RecursionMisses != nil}
	}
	a.lastInOrder = slices.IsSorted(a.prevIDs)
	sortByID(a.prevIDs, a.prevS)
}

// sameIDs says whether progs has exactly ids, in that order.
func sameIDs(ids []uint32, progs progView) bool {
	for i, id := range ids {
		if progs.at(i).ID != id {
			return false
		}
	}
	return true
}

// idle says whether an entry can be handed out again as it is for a
// program still idle: its own interval was idle too, it is not its
// program's first, and no profile is attached.
func idle(e *ProgramStat) bool {
	return e.Delta == (Rates{}) && !e.New && e.Profile == nil
}

// entryBox is a snapshot entry with the values it points to. The reader's
// values are per scan (a slice of every program's misses, of sleepable
// flags, of links): an entry that outlives its scan, handed out again by
// later snapshots, would keep the whole scan's slice alive, so it has its
// own copies, in one allocation.
type entryBox struct {
	ps        ProgramStat
	misses    uint64
	sleepable bool
}

// newEntry is a new entry for p, pointing into nothing of the scan's.
func newEntry(p *Program) *ProgramStat {
	b := &entryBox{}
	b.ps.Program = *p
	if p.RecursionMisses != nil {
		b.misses = *p.RecursionMisses
		b.ps.RecursionMisses = &b.misses
	}
	if p.Sleepable != nil {
		b.sleepable = *p.Sleepable
		b.ps.Sleepable = &b.sleepable
	}
	if len(p.Links) > 0 {
		b.ps.Links = ownLinks(p.Links)
	}
	return &b.ps
}

// ownLinks copies links and their missed counters.
func ownLinks(ls []Link) []Link {
	out := slices.Clone(ls)
	var missed []uint64
	for i := range out {
		if out[i].Missed != nil {
			if missed == nil {
				missed = make([]uint64, 0, len(out)-i)
			}
			missed = append(missed, *out[i].Missed)
			out[i].Missed = &missed[len(missed)-1]
		}
	}
	return out
}

// linkMisses moves the kprobe link missed counters from old's links to
// e's (nil: the program is new, or gone), adding an observation for each
// link whose counter grew since the last scan.
func (a *Agent) linkMisses(obs []missObservation, old, e *ProgramStat) []missObservation {
	if old != nil {
		for _, l := range old.Links {
			if l.Missed != nil && (e == nil || !hasLink(e.Links, l.ID)) {
				delete(a.prevLink, l.ID)
			}
		}
	}
	if e == nil {
		return obs
	}
	if a.prevLink == nil {
		a.prevLink = map[uint32]uint64{}
	}
	for _, l := range e.Links {
		if l.Missed == nil {
			continue
		}
		prev, ok := a.prevLink[l.ID]
		a.prevLink[l.ID] = *l.Missed
		if m := sub(*l.Missed, prev); ok && m > 0 {
			obs = append(obs, missObservation{key: episodeKey{SourceLinkMissed, e.ID, l.ID}, misses: m, runs: e.Delta.Runs, prog: &e.Program, kind: e.MissKind})
		}
	}
	return obs
}

// sameDynamic says whether p and o, two reads of the same program, agree
// on everything a scan sets (the fields resetDynamic resets): counters,
// joins, owners, pins. The static fields are one cached read's for an id.
// nil and empty Links or Owners differ: JSON shows null for one, [] for
// the other.
func sameDynamic(p, o *Program) bool {
	return p.RunCount == o.RunCount && p.RunTimeNs == o.RunTimeNs && sameValue(p.RecursionMisses, o.RecursionMisses) &&
		p.AttachType == o.AttachType && p.AttachTarget == o.AttachTarget && p.TargetClass == o.TargetClass && p.MissKind == o.MissKind &&
		sameValue(p.Sleepable, o.Sleepable) && sameLinks(p.Links, o.Links) &&
		(p.Owners == nil) == (o.Owners == nil) && slices.Equal(p.Owners, o.Owners) &&
		(p.Pins == nil) == (o.Pins == nil) && slices.Equal(p.Pins, o.Pins)
}

// sameValue says whether two optional values are both absent or equal.
func sameValue[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || *a == *b
}

func sameLinks(a, b []Link) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.ID != y.ID || x.ProgID != y.ProgID || x.Type != y.Type || x.AttachType != y.AttachType ||
			x.Target != y.Target || x.TargetClass != y.TargetClass || !sameValue(x.Missed, y.Missed) {
			return false
		}
	}
	return true
}

func hasLink(ls []Link, id uint32) bool {
	for i := range ls {
		if ls[i].ID == id {
			return true
		}
	}
	return false
}

// ownerStablePeriod is the owner refresh period while every owner process
// is watched: what it still catches (a program's fd passed to a new
// process while its owner lives on, a new pin) is rare, and a refresh
// walks every process's fds (make bench BENCH=agentcpu).
const ownerStablePeriod = 5 * time.Minute

// ownerRefreshDue says whether owners are re-read now whatever programs
// the scan finds: the period passed, or a watched owner process exited.
func (a *Agent) ownerRefreshDue(now time.Time) bool {
	period := a.cfg.OwnerRefresh
	if a.ownerSlow && a.attr.ownersStable() && !now.Before(a.ownerFastUntil) {
		period = max(period, ownerStablePeriod)
	}
	if now.Sub(a.ownersAt) >= period {
		return true
	}
	if a.attr.ownerExited() {
		a.ownerFastUntil = now.Add(2 * time.Minute)
		return true
	}
	return false
}

// earlyHolders are holders being read beside the programs. A program with
// an id above horizon (the highest of the previous scan) may have been
// loaded after that walk began, so it counts as not yet attributed and the
// next scan walks again.
type earlyHolders struct {
	c       chan holders
	horizon uint32
}

// attachOwners joins owners, pins and attachments to programs, re-reading
// them only when a program appeared that has not been attributed yet or
// the refresh period passed (then early delivers the holders): walking
// every process's fds is the most expensive part of a scan.
func (a *Agent) attachOwners(progs progView, now time.Time, st *ScanStats, early *earlyHolders) bool {
	if a.attr == nil {
		return false
	}
	refresh := early != nil
	n := progs.len()
	a.attr.beginApply()
	// The same programs as the last scan, all attributed then: none to
	// look up.
	if !a.r.joinsKept || !a.ownerAllKnown {
		for i := range n {
			if !a.ownerKnown[progs.at(i).ID] {
				refresh = true
				break
			}
		}
	}
	a.ownerAllKnown = !refresh
	if refresh {
		// apply expects each program as join left it: kept joins carry
		// the last refresh's owners and attachments.
		a.r.rejoin(progs)
		horizon := ^uint32(0)
		var h holders
		if early != nil {
			h, horizon = <-early.c, early.horizon
		} else {
			h = a.attr.readHolders()
		}
		for _, err := range a.attr.refresh(progs, h) {
			st.Errors++
			st.addError(err)
		}
		a.ownersAt = now
		clear(a.ownerKnown)
		a.ownerAllKnown = true
		for i := range n {
			if id := progs.at(i).ID; id <= horizon {
				a.ownerKnown[id] = true
			} else {
				a.ownerAllKnown = false
			}
		}
	}
	if refresh || !a.r.joinsKept {
		// Kept joins carry the last scan's owners, read from the same
		// answers.
		for i := range n {
			a.attr.apply(progs.at(i))
		}
	}
	if refresh {
		a.attr.dropGoneNetdevs()
	}
	return refresh
}

// Close releases the stats fd and the iterator, and ends open episodes.
func (a *Agent) Close() []Episode {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	a.stats.close()
	a.sysctl.close()
	if a.prof != nil {
		a.prof.close()
	}
	a.r.fdinfo.Close()
	if a.attr != nil {
		a.attr.close()
	}
	if a.r.source != nil {
		a.r.source.Close()
	}
	if a.r.iter != nil {
		a.r.iter.Close()
	}
	a.r.closeLinks()
	a.r.steady.close()
	return a.eps.closeAll("shutdown")
}

// idCursor finds ids in an ascending list: in O(1) each when they are
// looked up in ascending order (a merge), by binary search otherwise.
type idCursor struct {
	ids []uint32
	j   int
}

// find returns id's index and whether it is there.
func (c *idCursor) find(id uint32) (int, bool) {
	if c.j > 0 && c.j <= len(c.ids) && c.ids[c.j-1] >= id {
		c.j, _ = slices.BinarySearch(c.ids, id) // out of order: search
	}
	for c.j < len(c.ids) && c.ids[c.j] < id {
		c.j++
	}
	return c.j, c.j < len(c.ids) && c.ids[c.j] == id
}

// has says whether id is in the list, in any order of lookups.
func (c *idCursor) has(id uint32) bool {
	_, ok := slices.BinarySearch(c.ids, id)
	return ok
}

// progState is what a scan keeps of each program for the next one.
type progState struct {
	c counters
	e *ProgramStat // the entry handed out
	// quiet says e can be handed out again as it is (idle), hasMisses
	// that it has recursion misses: the next scan decides from these
	// without touching e.
	quiet, hasMisses bool
}

// sortByID sorts ids ascending with sts alongside, when they are not
// already (programs normally come in id order).
func sortByID(ids []uint32, sts []progState) {
	if slices.IsSorted(ids) {
		return
	}
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ids[idx[a]] < ids[idx[b]] })
	ids2, sts2 := slices.Clone(ids), slices.Clone(sts)
	for i, k := range idx {
		ids[i], sts[i] = ids2[k], sts2[k]
	}
}

// overhead is the calibration's overhead per attach type, one value shared
// by every snapshot until the calibration changes.
func (a *Agent) overhead() map[string]*float64 {
	if a.overheads == nil {
		a.overheads = map[string]*float64{}
		for _, c := range a.calibration {
			if c.Supported {
				v := c.OverheadNs
				a.overheads[c.AttachType] = &v
			}
		}
	}
	return a.overheads
}
