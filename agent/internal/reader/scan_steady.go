package reader

import (
	"fmt"

	"github.com/bpfleet/bpfleet/probes/bpfevents"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/probes/statstable"
)

// The steady read: a scan that walks every program (one iter/bpf_prog
// pass) costs more than the 4-syscall floor's tenth however little the
// iterator program does, because the walk itself does. So once a walk
// has given every program's prog->stats address, later scans do not walk
// while no program was loaded or unloaded:
//
//  1. drain the load/unload watcher (probes/bpfevents: perf side-band
//     records, no syscall); anything there, or records lost, means walk;
//  2. one BPF_PROG_TEST_RUN of probes/statstable sums each program's
//     per-CPU statistics from the addresses of the last walk;
//  3. drain again: a program freed before or during step 2 had its UNLOAD
//     record written before its memory was freed (then an RCU grace
//     period, then the free), so it is seen here; anything seen means the
//     table's numbers are discarded and this same scan walks.
//
// The kernel turns a CPU's perf events off for good when the CPU goes
// offline, so the watcher would go blind there: the table also counts CPU
// hotplug steps (a raw tracepoint on cpuhp_enter, read from an mmapped
// counter), and any step turns the steady read off for good.
//
// What the table gives is the []progstats.Stat a walk of known programs
// would give (compact, in id order), so readIter's merge runs unchanged.
// A kernel that refuses any part (perf_event_open, the syscall program,
// bpf_loop) keeps the walk on every scan, with the reason in the scan's
// stats.

// steadySource is the reader's state for the steady read.
type steadySource struct {
	// tried says the watcher and table were loaded (or refused) once.
	tried bool
	w     *bpfevents.Watcher
	tab   *statstable.Table
	cpus  int
	// off says why there is no steady read on this node ("" when there
	// is one).
	off string
	// addrs are the stats addresses of r.order's programs, in its order,
	// from the last read; valid says every one of them is known (the last
	// read was a walk that gave all, or a steady read since one).
	addrs []uint64
	valid bool
	// next is the spare buffer readIter fills.
	next []uint64
	// written says the table's slots hold addrs.
	written bool
	events  []bpfevents.Event
	stats   []progstats.Stat
	// hotplugs is the table's CPU hotplug count when the watcher was
	// known complete: a CPU taken offline since has its events off.
	hotplugs uint64
	// load opens the watcher and table; tests replace it.
	load func(cpus, programs int) (*bpfevents.Watcher, *statstable.Table, error)
}

// Why a scan walked, for ScanStats.WalkReason.
const (
	walkFirst   = "first read"
	walkChanged = "programs loaded or unloaded"
	walkLost    = "load/unload records lost"
	walkRaced   = "programs loaded or unloaded during the table read"
	walkCPUs    = "CPU hotplug"
)

// hotplugOff is why a CPU hotplug step turns the steady read off for good.
const hotplugOff = "a CPU was taken offline or brought online: the kernel turned its load/unload events off"

// loadSteady loads the table (and its hotplug counter) first, then opens
// the watcher, which checks every possible CPU is online: a CPU hotplug
// step from then on moves the counter.
func loadSteady(cpus, programs int) (*bpfevents.Watcher, *statstable.Table, error) {
	tab, err := statstable.Load(cpus, statstable.Capacity(programs))
	if err != nil {
		return nil, nil, fmt.Errorf("loading the stats table: %w", err)
	}
	w, err := bpfevents.Open(cpus)
	if err != nil {
		tab.Close()
		return nil, nil, err
	}
	if tab.Hotplugs() != 0 {
		w.Close()
		tab.Close()
		return nil, nil, fmt.Errorf("a CPU was taken offline or brought online while the load/unload watcher opened")
	}
	return w, tab, nil
}

// open loads the watcher and the table once, before the first walk (so
// that the walk's programs are all the watcher needs to have seen
// since).
func (sd *steadySource) open(programs int) {
	sd.tried = true
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		sd.off = err.Error()
		return
	}
	load := sd.load
	if load == nil {
		load = loadSteady
	}
	sd.cpus = cpus
	sd.w, sd.tab, err = load(cpus, programs)
	if err != nil {
		sd.off = "no steady read, every scan walks: " + err.Error()
		if len(sd.off) > 300 {
			sd.off = sd.off[:300] + "…"
		}
	}
}

// disable closes the steady read for good, saying why.
func (sd *steadySource) disable(why string) {
	sd.close()
	sd.off = "no steady read, every scan walks: " + why
}

func (sd *steadySource) close() {
	if sd.tab != nil {
		sd.tab.Close()
		sd.tab = nil
	}
	if sd.w != nil {
		sd.w.Close()
		sd.w = nil
	}
	sd.valid = false
}

// steadyRead returns the statistics of r.order's programs, in its order,
// without a walk, or ok=false with why the scan must walk (st says it
// either way).
func (r *Reader) steadyRead(st *ScanStats) ([]progstats.Stat, bool) {
	sd := &r.steady
	if !sd.tried {
		sd.open(len(r.progs))
	}
	walk := func(why string) ([]progstats.Stat, bool) {
		st.Walk, st.WalkReason = true, why
		return nil, false
	}
	if sd.w == nil {
		return walk(sd.off)
	}
	evs, lost := sd.w.Drain(sd.events[:0])
	sd.events = evs[:0]
	switch {
	case lost:
		return walk(walkLost)
	case len(evs) > 0:
		return walk(walkChanged)
	case sd.tab.Hotplugs() != sd.hotplugs:
		sd.disable(hotplugOff)
		return walk(walkCPUs)
	case !sd.valid || r.order == nil:
		return walk(walkFirst)
	}
	n := len(r.order)
	if n > sd.tab.Cap() {
		tab, err := statstable.Load(sd.cpus, statstable.Capacity(n))
		if err != nil {
			sd.disable(fmt.Sprintf("reloading the stats table for %d programs: %v", n, err))
			return walk(sd.off)
		}
		if tab.Hotplugs() != 0 || sd.tab.Hotplugs() != sd.hotplugs {
			tab.Close()
			sd.disable(hotplugOff)
			return walk(walkCPUs)
		}
		sd.tab.Close()
		sd.tab, sd.written, sd.hotplugs = tab, false, 0
	}
	slots := sd.tab.Slots()[:n]
	if !sd.written {
		for i, a := range sd.addrs {
			slots[i].Stats = a
		}
		sd.written = true
	}
	if _, err := sd.tab.Run(n); err != nil {
		sd.disable(err.Error())
		return walk(sd.off)
	}
	evs, lost = sd.w.Drain(sd.events[:0])
	sd.events = evs[:0]
	if lost || len(evs) > 0 {
		return walk(walkRaced)
	}
	if sd.tab.Hotplugs() != sd.hotplugs {
		sd.disable(hotplugOff)
		return walk(walkCPUs)
	}
	stats := sd.stats[:0]
	for i, s := range r.order {
		sl := &slots[i]
		stats = append(stats, progstats.Stat{
			ID:          s.prog.ID,
			Whole:       -1,
			StatsKnown:  sl.Flags&statstable.FlagSummed != 0 && int(sl.CPUs) == sd.cpus,
			MissesKnown: sl.Flags&statstable.FlagMisses != 0,
			RunCount:    sl.Cnt,
			RunTimeNs:   sl.Nsecs,
			Misses:      sl.Misses,
			StatsAddr:   sd.addrs[i],
		})
	}
	sd.stats = stats
	return stats, true
}

// keepAddrs records the stats addresses of the programs a read returned
// (in r.order's order); walked says the read was a walk, whose addresses
// may differ from the table's.
// It returns the spare buffer for the next read's addresses.
func (sd *steadySource) keepAddrs(addrs []uint64, walked bool) []uint64 {
	if sd.w == nil {
		return addrs[:0]
	}
	valid := true
	for _, a := range addrs {
		if a == 0 {
			valid = false
			break
		}
	}
	if walked || len(addrs) != len(sd.addrs) {
		sd.written = false
	}
	prev := sd.addrs
	sd.addrs, sd.valid = addrs, valid
	return prev[:0]
}

// SteadyRead says whether scans read counters without a walk while no
// program is loaded or unloaded (known after the first scan), with the
// table's variant when they do, and why not, in one line, when they don't.
func (r *Reader) SteadyRead() (bool, string) {
	sd := &r.steady
	switch {
	case sd.w != nil && sd.tab != nil:
		return true, fmt.Sprintf("stats table (%s) over %d CPUs", sd.tab.Variant(), sd.cpus)
	case !sd.tried && r.iter == nil:
		return false, "programs are read by syscall: every scan walks"
	case !sd.tried:
		return false, "not decided yet (the first scan loads it)"
	}
	return false, sd.off
}
