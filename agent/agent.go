package agent

import (
	"context"
	"errors"
	"fmt"
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/stats"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// Config is the agent's configuration. The zero value is usable: defaults
// are filled in by New.
type Config struct {
	// StatsMode is always (run-time stats on with BPF_ENABLE_STATS for
	// the agent's lifetime: the fd is held, the sysctl is never written),
	// sampled or off (see StatsAlways...). Empty: the agent leaves stats
	// alone.
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
	// NoPins leaves bpffs unwalked: programs get no Pins. For a command
	// that shows none (maps): on a node whose loader pins its maps, a
	// one-shot walk opens every pinned file.
	NoPins bool
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
	// CacheDir is where the iterators' CO-RE results are cached
	// (internal/config: $BPFLEET_CACHE_DIR, else the user cache
	// directory); "" for no cache, each load then parsing kernel BTF.
	CacheDir string
	// Now is the clock; tests inject one. Default time.Now.
	Now func() time.Time
	// OwnerIterator finds owners with the task_file iterator instead of a
	// /proc walk: one read() for every process; loading it costs a kernel
	// BTF parse (tens of ms) where the CO-RE cache does not hold it, so
	// long-running commands ask for it and one-shot ones take it from the
	// cache alone.
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
	// in BPFFS (agent/internal/reader/scan_pin.go) and, without them,
	// "auto" scans by syscall and finds owners by the /proc walk.
	OneShot bool
	// Maps reads every BPF map on the node (Snapshot.Maps): at each scan,
	// or with MapInterval at most that often but for scans that find a
	// program loaded or unloaded (their maps are joined at once); scans in
	// between carry the last read's maps.
	Maps        bool
	MapInterval time.Duration
	// MapCountBound, above 0, counts the elements of hash maps whose count
	// the kernel cannot give (no bpf_map_sum_elem_count, before Linux
	// 6.6) by walking at most that many keys: one syscall per key.
	MapCountBound int
	// MapPressure counts each LRU hash map's evictions with the agent's
	// own probe (probes/mappressure), read with the maps: Map.Evictions.
	MapPressure bool
	// MapRefusals adds, with MapPressure, the count of each hash-family
	// map's refused updates (Map.RefusedUpdates): an fexit program on
	// every hash update of the node, so opt-in.
	MapRefusals bool
	// Parallel is how many goroutines read programs seen for the first
	// time (default 1). One-shot commands set it to the CPU count; the
	// long-running agent keeps one, since after its first scan nearly
	// everything is cached.
	Parallel int
	// WatchMisses runs the miss watcher (probes/misswatch): hardware
	// watchpoints on the per-CPU miss counters of the programs with an
	// open miss episode (and of WatchPrograms), as many as the CPU's debug
	// registers allow, each sampled miss explained by its kernel stack
	// (Snapshot.MissWatch, Snapshot.Misses, ProgramStat.MissCauses).
	WatchMisses bool
	// WatchPrograms are watched from the first scan whether they missed
	// or not (`bpfleet misses PROG...`), before those with episodes.
	WatchPrograms []uint32
	// MissBudget is how many misses each CPU may sample per watched
	// program per interval; past it the watchpoint is off until the next
	// scan (the misses are still counted, as unexplained). Default
	// DefaultMissBudget.
	MissBudget int
}

// DefaultMissBudget is Config.MissBudget's default: each sampled miss costs
// a debug exception and a stack walk (a few µs), so 64 per CPU per program
// per interval bounds a miss storm's cost to well under 1 ms a second.
const DefaultMissBudget = 64

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
	r      *reader.Reader
	stats  *stats.Ctl
	smp    *stats.Sampler // sampled mode only
	prof   *profiles      // with Config.Profile only
	maps   *mapReader     // with Config.Maps only
	kernel KernelInfo
	eps    *misses.Tracker
	mw     *missWatch // with Config.WatchMisses only

	seq      uint64
	prevTime time.Time
	// prevIDs (ascending) and prevS are the previous scan's programs:
	// their counters and entries; spareIDs and spareS are the buffers the
	// next scan fills.
	prevIDs, spareIDs []uint32
	prevS, spareS     []progState
	prevLink          map[uint32]linkMissedState // kprobe missed by link id
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
	sysctl *stats.SysctlReader
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
	// afterEarlyWalk, set by tests only, runs between the early holders'
	// walk and the program read; earlyWalkStart, also for tests, runs in
	// the early walk's goroutine before it walks.
	afterEarlyWalk func(*earlyHolders)
	earlyWalkStart func()

	calibration []Calibration
	// caps names the capabilities the agent uses and lacks (degraded.go).
	caps string
	// apparmor is the agent's AppArmor label (confinement.go).
	apparmor   string
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
		kernel:     ReadKernelInfo(cfg.ProcRoot),
		eps:        misses.NewTracker(cfg.QuietIntervals),
		ownerKnown: map[uint32]bool{},
		sysctl:     stats.NewSysctlReader(cfg.ProcRoot),
		caps:       missingCaps(),
		apparmor:   appArmorLabel(),
	}
	if _, _, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, 0); err != nil {
		return nil, fmt.Errorf("%w (%v)", reader.ErrPrivilege, err)
	}
	if cfg.StatsMode != "" {
		if !cfg.StatsMode.Valid() {
			return nil, fmt.Errorf("stats mode %q: want always, sampled or off", cfg.StatsMode)
		}
		a.stats = stats.NewCtl(cfg.StatsMode, cfg.StatsWindow, cfg.StatsPeriod, cfg.Now)
		if cfg.StatsMode == StatsSampled {
			a.smp = stats.NewSampler(a.stats.Window())
		}
		a.cfg.StatsMode = cfg.StatsMode
	}
	a.prevCPU = stats.ProcessCPU()
	if len(cfg.Profile) > 0 {
		a.prof = newProfiles(cfg.Profile, cfg.ProfileWindow, cfg.ProfilePeriod)
	}
	// The reader chooses the scan source once per kernel, here (after
	// every check that can fail New, so nothing leaks): the iterator when
	// this kernel loads it, else the syscall path with the reason in
	// every snapshot.
	a.r = reader.New(reader.Options{
		NoIterator: cfg.NoIterator,
		ScanSource: cfg.ScanSource,
		OneShot:    cfg.OneShot,
		BPFFS:      cfg.BPFFS,
		Parallel:   cfg.Parallel,
		ProcRoot:   cfg.ProcRoot,
		CacheDir:   cfg.CacheDir,
	})
	if cfg.Owners {
		a.attr = newAttribution(cfg)
		a.ownerSlow = ownerSlow
	}
	if cfg.Maps {
		a.maps = newMapReader(&cfg)
	}
	if cfg.WatchMisses {
		cpus, err := progstats.PossibleCPUs()
		if err != nil {
			cpus = runtime.NumCPU()
		}
		a.mw = newMissWatch(&a.cfg, cpus)
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

// fillOwner completes a turned-away task's owner with the owner filler's
// pod names, where one is plugged in.
func (a *Agent) fillOwner(o *Owner) {
	if a.attr != nil && a.attr.filler != nil {
		a.attr.filler.Fill(o)
	}
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
	// otherwise wait for their sum. The agent's own fds are walked after
	// the read (attachOwners), which opens programs by id.
	var early *earlyHolders
	if a.attr != nil && a.ownerRefreshDue(start) {
		early = &earlyHolders{c: make(chan holders, 1), horizon: a.maxProgID}
		go func() {
			if a.earlyWalkStart != nil {
				a.earlyWalkStart()
			}
			early.c <- a.attr.walkOthers()
		}()
		if a.afterEarlyWalk != nil {
			a.afterEarlyWalk(early)
		}
	}
	readAt := time.Now()
	progs, st, err := a.r.ReadView(start)
	if err != nil {
		if early != nil {
			<-early.c // the walk must not outlive the scan
		}
		return nil, err
	}
	if a.mw != nil {
		// After the counters: every miss the read counts is sampled by
		// now; one sampled after readAt may be the next read's, one
		// after now is.
		a.mw.drain(a.fillOwner, readAt, time.Now())
	}
	now := a.cfg.Now()
	var dt time.Duration
	if !a.prevTime.IsZero() {
		dt = now.Sub(a.prevTime)
	}

	st.OwnersRefreshed = a.attachOwners(progs, now, &st, early)
	if a.cfg.OneShot {
		progs = a.withoutOwnIterators(progs, &st)
	}
	if a.attr != nil && st.OwnersRefreshed {
		st.OwnersPin, st.OwnersSource = a.attr.pin, a.attr.sourceName()
	}

	snap := &Snapshot{
		Seq:      a.seq + 1,
		Time:     now,
		Interval: dt,
		Kernel:   a.kernel,
		Stats:    a.stats.State(a.sysctl.Read()),
		Degraded: a.degraded(),
	}
	// Sampled mode scales run counts from the windows; where another
	// holder kept stats on throughout, the kernel's counts are exact and
	// added as they are.
	if a.smp != nil {
		snap.Stats.Counts = a.smp.Begin(a.stats.Coverage(a.smp.Buf), a.prevTime)
	}
	cpu := stats.ProcessCPU()
	if dt > 0 {
		snap.AgentCPUShare = float64(cpu-a.prevCPU) / float64(dt)
	}
	a.prevCPU = cpu
	// Joins kept by the reader and no owner refresh: a program whose
	// counters did not move is the same as in the last scan.
	a.assemble(snap, progs, dt, a.smp, a.r.JoinsKept() && !st.OwnersRefreshed)
	if a.maps != nil {
		snap.Maps, snap.MapScan = a.maps.read(snap.Programs, now)
	}
	if a.mw != nil {
		a.mw.schedule(now, snap.Episodes, snap.Programs, a.r)
		snap.MissWatch = a.mw.state()
		snap.Misses = a.mw.credit.Recent()
	}

	st.Duration = a.cfg.Now().Sub(start)
	snap.Scan = st
	a.prevTime = now
	if n := progs.Len(); n > 0 {
		a.maxProgID = progs.At(n - 1).ID // read in id order
	}
	a.seq++
	return snap, nil
}

// withoutOwnIterators drops from a one-shot scan the iterator programs it
// loaded itself (a running agent's pins are the agent's, and stay): they
// live as long as the command, owned by it — bpftool does not list its
// pid iterator either.
func (a *Agent) withoutOwnIterators(progs reader.View, st *ScanStats) reader.View {
	var own []uint32
	if id := a.r.OwnProgram(); id != 0 {
		own = append(own, id)
	}
	if a.attr != nil {
		if id := a.attr.ownProgram(); id != 0 {
			own = append(own, id)
		}
	}
	if len(own) == 0 {
		return progs
	}
	n := progs.Len()
	for i := range n {
		if p := progs.At(i); slices.Contains(own, p.ID) {
			st.Links -= len(p.Links)
		}
	}
	progs = progs.Without(own)
	st.Programs -= n - progs.Len()
	return progs
}

// SteadyRead says whether scans read counters without a walk while no
// program is loaded or unloaded (known after the first scan), with the
// table's variant when they do, and why not, in one line, when they don't.
func (a *Agent) SteadyRead() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.r.SteadyRead()
}

// Close releases the stats fd and the iterator, and ends open episodes.
func (a *Agent) Close() []Episode {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	a.stats.Close()
	a.sysctl.Close()
	if a.prof != nil {
		a.prof.close()
	}
	a.maps.close()
	if a.mw != nil {
		a.mw.close()
	}
	if a.attr != nil {
		a.attr.close()
	}
	a.r.Close()
	return a.eps.CloseAll("shutdown")
}
