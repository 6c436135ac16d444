package agent

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/sysfile"
	"github.com/bpfleet/bpfleet/probes/misswatch"
)

// missWatch runs the miss watcher for the agent: which programs are
// watched (misses.Slots: those named by Config.WatchPrograms, those with
// an open recursion-miss episode, rotating fairly when more wait, and
// those that missed before while their slots are not needed), their sampled misses explained, and each
// interval's misses split by cause so that the causes add up to the
// kernel's count: what was not sampled is unexplained.
type missWatch struct {
	w        *misswatch.Watcher // nil when unavailable
	reason   string             // why unavailable
	budget   int
	procRoot string
	syms     *misswatch.Symbols
	ranger   *misswatch.Ranger
	explicit []uint32
	// slots holds who is armed, since when and why, and decides who
	// gives way; watched the armed programs' details.
	slots   *misses.Slots
	watched map[uint32]*watchedProg
	// lastMiss is when each program last missed, as far as the agent saw
	// (the end of its episode's last interval with misses); refused, the
	// programs the kernel would not arm and why, tried again when they
	// miss again.
	lastMiss map[uint32]time.Time
	refused  map[uint32]string
	missing  map[uint32]bool // this scan's, kept to be reused
	cands    []misses.Candidate
	// credit matches the explained samples to the intervals whose reads
	// counted their misses.
	credit *misses.Credit
	spent  map[uint32]bool
	// blind holds the programs whose counted misses trip no watchpoint
	// (blindIntervals, blindMisses): they are not armed again.
	blind   map[uint32]BlindProgram
	samples uint64
	over    uint64
}

type watchedProg struct {
	name    string
	samples uint64
	ranges  []misswatch.Range
	// rangesFrom is the source of ranges ("" when none gave them: its
	// samples are then unexplained, unseen says this interval had some).
	rangesFrom string
	unseen     bool
	guard      misswatch.Guard
	// dry counts the misses of the intervals since its last sample (or
	// spent budget) in which the program, watched from the interval's
	// start, missed and gave no sample; dryIntervals how many.
	dry          uint64
	dryIntervals int
}

// A program is blind to the watcher once blindIntervals intervals in
// which it missed (quiet ones between do not count), with at least
// blindMisses misses among them, gave no sample while it was watched and
// its budget unspent: the kernel counts its misses where a watchpoint
// does not fire (arm64 runs kprobes as debug exceptions, inside which
// watchpoints are off). Its slot goes to others. On amd64 about one
// counted miss in five gave no sample under qemu, so six in a row
// unsampled by chance is about 1 in 15,000.
const (
	blindIntervals = 2
	blindMisses    = 6
)

// newMissWatch starts the watcher, or records why it cannot run.
func newMissWatch(cfg *Config, cpus int) *missWatch {
	m := &missWatch{budget: cfg.MissBudget, procRoot: cfg.ProcRoot, explicit: cfg.WatchPrograms,
		slots: misses.NewSlots(), watched: map[uint32]*watchedProg{}, lastMiss: map[uint32]time.Time{}, refused: map[uint32]string{}, missing: map[uint32]bool{},
		credit: misses.NewCredit(), spent: map[uint32]bool{}, blind: map[uint32]BlindProgram{}}
	if m.budget <= 0 {
		m.budget = DefaultMissBudget
	}
	w, err := misswatch.New(misswatch.Options{CPUs: cpus, Budget: m.budget})
	if err != nil {
		m.reason = err.Error()
		return m
	}
	m.w = w
	m.syms = misswatch.NewSymbols(cfg.ProcRoot + "/kallsyms")
	m.syms.Check() // kallsyms reading zeros is known before the first miss
	m.ranger = misswatch.NewRanger(cfg.CacheDir)
	return m
}

// drain takes the samples of the interval after the scan read the
// counters (the read ran from cut to end): every miss the read counted is
// in the rings by then, and a miss after it is sampled with a later time.
// Reading the rings first instead left every miss between the drain and
// the read (the drain's symbol and task lookups take a second on a slow
// CPU) counted in one interval and sampled in the next, unexplained in
// both. A sample is credited to the interval whose read counted it
// (explain): one from before the read to this interval, one from after it
// to the next, one from during it to this interval while its count has
// room.
func (m *missWatch) drain(fill func(*Owner), cut, end time.Time) {
	clear(m.spent)
	m.credit.Begin(cut, end)
	if m.w == nil {
		return
	}
	for _, wp := range m.watched {
		wp.unseen = false
	}
	var raw []misswatch.Sample
	for _, d := range m.w.Drain(func(s misswatch.Sample) { raw = append(raw, s) }) {
		if d.Spent {
			m.spent[d.ProgID] = true
		}
		if wp := m.watched[d.ProgID]; wp != nil {
			wp.samples += uint64(d.Samples)
		}
	}
	m.samples += uint64(len(raw))
	// Every new address of the drain named in one pass over kallsyms
	// (Frames below then finds them all known).
	var addrs []uint64
	for _, s := range raw {
		addrs = append(addrs, s.Stack...)
	}
	m.syms.Resolve(addrs)
	comms := map[int]Owner{}
	for _, s := range raw {
		wp := m.watched[s.ProgID]
		if wp == nil {
			continue
		}
		frames := misswatch.Frames(s.Stack, wp.ranges, m.syms)
		cause, ctx := misswatch.Explain(frames, wp.guard, len(wp.ranges) > 0 && !s.Truncated && m.syms.Err == nil)
		if cause == "" {
			// Its own code could not be told on the stack: the miss
			// stays unexplained rather than read from that absence.
			wp.unseen = true
			continue
		}
		o, ok := comms[s.TID]
		if !ok {
			o = m.task(s.PID, s.TID, fill)
			comms[s.TID] = o
		}
		ms := MissSample{Time: s.Time, ProgID: s.ProgID, ProgName: wp.name, CPU: s.CPU, Context: ctx, Cause: cause,
			PID: s.PID, TID: s.TID, Comm: o.Comm, ContainerID: o.ContainerID, PodName: o.PodName, PodNamespace: o.PodNamespace,
			Stack: m.stackNames(s.Stack, frames)}
		m.credit.Add(ms)
	}
}

// task names the task a sample interrupted: comm from /proc, container and
// pod from its cgroup (and the agent's owner filler, if any). The task may
// be gone by now: then only its ids.
func (m *missWatch) task(pid, tid int, fill func(*Owner)) Owner {
	o := Owner{PID: pid}
	if pid == 0 {
		o.Comm = "swapper" // the idle task: an interrupt hit an idle CPU
		return o
	}
	base := m.procRoot + "/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid)
	if b, err := sysfile.Read(base + "/comm"); err == nil {
		o.Comm = strings.TrimSpace(string(b))
	}
	if b, err := sysfile.Read(base + "/cgroup"); err == nil {
		// The path that names the container, as the owner walk finds
		// it (a hybrid host's v1 hierarchies included).
		_, o.Cgroup = owners.ContainerOf(owners.ParseProcCgroup(b))
		o.FillFromCgroup()
		if fill != nil {
			fill(&o)
		}
	}
	return o
}

// stackNames names a stack's frames: the symbol, the program's own frames
// by the program's name where kallsyms has none, else the address.
func (m *missWatch) stackNames(stack []uint64, frames []misswatch.Frame) []string {
	out := make([]string, len(stack))
	for i, a := range stack {
		switch n := m.syms.Name(a); {
		case n != "":
			out[i] = n
		case frames[i].Own:
			out[i] = fmt.Sprintf("[watched program]+0x%x", frames[i].OwnOff)
		default:
			out[i] = fmt.Sprintf("0x%x", a)
		}
	}
	return out
}

// explain splits an interval's misses of a program by cause
// (misses.Credit), and learns from them whether the program is blind.
func (m *missWatch) explain(id uint32, misses uint64) (MissCauses, []MissSample) {
	c, credited := m.credit.Take(id, misses)
	n := uint64(len(credited))
	if m.spent[id] {
		m.over += misses - n
	}
	if wp := m.watched[id]; wp != nil {
		switch {
		case n > 0 || m.spent[id] || wp.unseen:
			wp.dry, wp.dryIntervals = 0, 0
		case misses > 0:
			wp.dry += misses
			wp.dryIntervals++
			if wp.dryIntervals >= blindIntervals && wp.dry >= blindMisses {
				m.blind[id] = BlindProgram{ProgID: id, ProgName: wp.name, Misses: wp.dry}
			}
		}
	}
	return c, credited
}

// schedule chooses the programs to watch in the next interval (the
// policy is misses.Slots'): named ones, those missing now, and those that
// missed before while nobody with newer misses needs their slots.
func (m *missWatch) schedule(now time.Time, episodes []Episode, progs []*ProgramStat, r *reader.Reader) {
	if m.w == nil {
		return
	}
	byID := func(id uint32) *ProgramStat {
		i, ok := slices.BinarySearchFunc(progs, id, func(p *ProgramStat, id uint32) int { return int(p.ID) - int(id) })
		if ok {
			return progs[i]
		}
		for _, p := range progs { // not in id order
			if p.ID == id {
				return p
			}
		}
		return nil
	}
	for id := range m.lastMiss {
		if byID(id) == nil {
			delete(m.lastMiss, id)
		}
	}
	for id := range m.blind {
		if byID(id) == nil {
			delete(m.blind, id)
		}
	}
	for id := range m.refused {
		if byID(id) == nil {
			delete(m.refused, id)
		}
	}
	// Buffers kept from scan to scan: a quiet node's scan allocates
	// nothing here.
	clear(m.missing)
	for _, e := range episodes {
		if e.Open && e.Source == SourceRecursionMisses {
			m.missing[e.ProgID] = true
			m.lastMiss[e.ProgID] = e.End
		}
	}
	m.cands = m.cands[:0]
	for _, p := range progs {
		c := misses.Candidate{ID: p.ID, Named: slices.Contains(m.explicit, p.ID), Missing: m.missing[p.ID]}
		if p.RecursionMisses != nil {
			c.Misses = *p.RecursionMisses
		}
		if !c.Named && !c.Missing && c.Misses == 0 {
			continue
		}
		if _, blind := m.blind[p.ID]; blind {
			continue
		}
		// A program the kernel refused to arm is tried again only when
		// it misses again (or is named), not every scan.
		if _, refused := m.refused[p.ID]; refused && !c.Named && !c.Missing {
			continue
		}
		c.LastMiss = m.lastMiss[p.ID]
		m.cands = append(m.cands, c)
	}
	m.slots.Schedule(now, m.cands, func(id uint32) (bool, bool) {
		err := m.arm(byID(id), r.StatsAddr(id))
		if err != nil && !errors.Is(err, misswatch.ErrNoSlot) {
			m.refused[id] = err.Error()
		}
		return err == nil, errors.Is(err, misswatch.ErrNoSlot)
	}, m.disarm)
}

func (m *missWatch) arm(p *ProgramStat, stats uint64) error {
	if stats == 0 {
		return fmt.Errorf("program %d: no stats address (read by syscall)", p.ID)
	}
	ranges, from, err := m.ranger.Ranges(p.ID)
	if err != nil {
		return err
	}
	if len(ranges) == 0 {
		from = ""
	}
	if err := m.w.Arm(p.ID, stats); err != nil {
		return err
	}
	delete(m.refused, p.ID)
	m.watched[p.ID] = &watchedProg{name: p.Name, ranges: ranges, rangesFrom: from, guard: guardOf(&p.Program)}
	return nil
}

func (m *missWatch) disarm(id uint32) {
	m.w.Disarm(id)
	delete(m.watched, id)
}

// guardOf is the guard that turns a program's runs away.
func guardOf(p *Program) misswatch.Guard {
	if guardedAttach(p.AttachType) {
		return misswatch.GuardProg
	}
	switch p.Type {
	case "kprobe", "tracepoint", "perf_event":
		return misswatch.GuardActive
	}
	return misswatch.GuardProg
}

// NameWatched names the programs the miss watcher holds watchpoints on
// from the next scan on, before any other (Config.WatchPrograms for a
// caller that learns the ids from a scan, as `bpfleet misses PROG...`
// does). Nothing without Config.WatchMisses. (Not to be confused with the
// commands' --watch, which prints every interval.)
func (a *Agent) NameWatched(ids []uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mw != nil {
		a.mw.explicit = append([]uint32(nil), ids...)
	}
}

// state is the watcher's part of a snapshot.
func (m *missWatch) state() MissWatch {
	s := MissWatch{Available: m.w != nil, Reason: m.reason, Slots: m.slots.Known, Budget: m.budget,
		Waiting: m.slots.Waiting(), Samples: m.samples, OverBudget: m.over, Late: m.credit.Late}
	for id, wp := range m.watched {
		w := WatchedProgram{ProgID: id, ProgName: wp.name, Samples: wp.samples, Ranges: wp.rangesFrom}
		if sl := m.slots.Slot(id); sl != nil {
			w.Since, w.Why = sl.Since, sl.Why
		}
		s.Watched = append(s.Watched, w)
	}
	slices.SortFunc(s.Watched, func(a, b WatchedProgram) int { return int(a.ProgID) - int(b.ProgID) })
	for _, b := range m.blind {
		s.Blind = append(s.Blind, b)
	}
	slices.SortFunc(s.Blind, func(a, b BlindProgram) int { return int(a.ProgID) - int(b.ProgID) })
	if m.w != nil {
		unseen := m.ranger.Unseen(m.syms.Err)
		s.Symbols = misswatch.SymbolSource(m.syms.Err, unseen == nil)
		if unseen != nil {
			s.Unseen = unseen.Error()
		}
	}
	return s
}

func (m *missWatch) close() {
	if m.w != nil {
		m.w.Close()
		m.ranger.Close()
	}
}
