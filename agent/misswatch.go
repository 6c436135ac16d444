package agent

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/sysfile"
	"github.com/bpfleet/bpfleet/probes/misswatch"
)

// missWatch runs the miss watcher for the agent: which programs are
// watched (those named by Config.WatchPrograms, then those with an open
// recursion-miss episode, as many as the debug registers allow, rotating
// fairly when more wait), their sampled misses explained, and each
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
	// slots is how many programs were armed when the kernel first had no
	// free debug register (0: never hit).
	slots   int
	watched map[uint32]*watchedProg
	// waitSince is when each waiting program started to wait.
	waitSince map[uint32]time.Time
	waiting   []uint32
	// pending holds each program's explained samples of this scan, to be
	// matched to the misses its read counted; carry those explain left
	// over that came after cut (the scan's read began), which are of
	// misses the next read counts.
	pending map[uint32][]MissSample
	carry   map[uint32][]MissSample
	cut     time.Time
	spent   map[uint32]bool
	// blind holds the programs whose counted misses trip no watchpoint
	// (blindIntervals, blindMisses): they are not armed again.
	blind   map[uint32]BlindProgram
	recent  []MissSample
	samples uint64
	over    uint64
}

type watchedProg struct {
	name    string
	since   time.Time
	samples uint64
	scans   int
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

// rotateScans is how many scans a program with an episode keeps its
// watchpoints while others wait for one.
const rotateScans = 3

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
		watched: map[uint32]*watchedProg{}, waitSince: map[uint32]time.Time{},
		pending: map[uint32][]MissSample{}, spent: map[uint32]bool{}, blind: map[uint32]BlindProgram{}}
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
// counters (the read began at cut): every miss the read counted is in the
// rings by then, and a miss after it is sampled with a later time. Reading
// the rings first instead left every miss between the drain and the read
// (the drain's symbol and task lookups take a second on a slow CPU)
// counted in one interval and sampled in the next, unexplained in both.
func (m *missWatch) drain(fill func(*Owner), cut time.Time) {
	m.recent = m.recent[:0]
	clear(m.spent)
	// The last scan's leftovers after its cut start this scan's pools;
	// the rest were of misses an earlier read counted.
	clear(m.pending)
	m.pending, m.carry = m.carry, m.pending
	if m.pending == nil {
		m.pending = map[uint32][]MissSample{}
	}
	m.cut = cut
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
		m.pending[s.ProgID] = append(m.pending[s.ProgID], ms)
		if len(m.recent) == MaxMissSamples {
			copy(m.recent, m.recent[1:])
			m.recent = m.recent[:MaxMissSamples-1]
		}
		m.recent = append(m.recent, ms)
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

// explain splits an interval's misses of a program by cause: one counted
// miss per pending sample, oldest first, the rest unexplained. Samples
// beyond the count are of misses after the read (kept for the next
// interval when they came after the cut) or of writes a CPU re-trapped
// (qemu's arm64 does), dropped: counts come from the kernel, causes from
// the samples.
func (m *missWatch) explain(id uint32, misses uint64) (MissCauses, []MissSample) {
	var c MissCauses
	pool := m.pending[id]
	slices.SortStableFunc(pool, func(a, b MissSample) int { return a.Time.Compare(b.Time) })
	n := min(uint64(len(pool)), misses)
	for _, s := range pool[:n] {
		c.Add(s.Cause, 1)
	}
	c.Unexplained = misses - n
	for _, s := range pool[n:] {
		if !m.cut.IsZero() && !s.Time.Before(m.cut) {
			m.carry[id] = append(m.carry[id], s)
		}
	}
	if m.spent[id] {
		m.over += misses - n
	}
	delete(m.pending, id)
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
	return c, pool[:n]
}

// schedule chooses the programs to watch in the next interval.
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
	for id := range m.blind {
		if byID(id) == nil {
			delete(m.blind, id)
		}
	}
	var want []uint32
	for _, id := range m.explicit {
		if _, ok := m.blind[id]; !ok {
			want = append(want, id)
		}
	}
	for _, e := range episodes {
		if _, blind := m.blind[e.ProgID]; e.Open && e.Source == SourceRecursionMisses && !blind && !slices.Contains(want, e.ProgID) {
			want = append(want, e.ProgID)
		}
	}
	// Gone or quiet programs give their slots back.
	for id := range m.watched {
		if !slices.Contains(want, id) || byID(id) == nil {
			m.disarm(id)
		}
	}
	var wait []uint32
	for _, id := range want {
		if m.watched[id] == nil && byID(id) != nil {
			wait = append(wait, id)
			if _, ok := m.waitSince[id]; !ok {
				m.waitSince[id] = now
			}
		}
	}
	for id := range m.waitSince {
		if !slices.Contains(wait, id) {
			delete(m.waitSince, id)
		}
	}
	slices.SortStableFunc(wait, func(a, b uint32) int { return m.waitSince[a].Compare(m.waitSince[b]) })
	// Fair rotation: while others wait, a program watched for
	// rotateScans scans (not one the user named) gives its slot up.
	if len(wait) > 0 && m.slots > 0 && len(m.watched) >= m.slots {
		free := len(wait)
		for id, wp := range m.watched {
			if free == 0 {
				break
			}
			if wp.scans >= rotateScans && !slices.Contains(m.explicit, id) {
				m.disarm(id)
				free--
			}
		}
	}
	for _, wp := range m.watched {
		wp.scans++
	}
	m.waiting = m.waiting[:0]
	for i, id := range wait {
		p := byID(id)
		err := m.arm(p, r.StatsAddr(id), now)
		if errors.Is(err, misswatch.ErrNoSlot) {
			if m.slots == 0 || len(m.watched) < m.slots {
				m.slots = len(m.watched)
			}
			m.waiting = append(m.waiting, wait[i:]...)
			break
		}
		if err != nil {
			m.waiting = append(m.waiting, id)
		}
	}
}

func (m *missWatch) arm(p *ProgramStat, stats uint64, now time.Time) error {
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
	delete(m.waitSince, p.ID)
	m.watched[p.ID] = &watchedProg{name: p.Name, since: now, ranges: ranges, rangesFrom: from, guard: guardOf(&p.Program)}
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

// Watch names the programs to watch from the next scan on, before those
// with episodes (Config.WatchPrograms for a caller that learns the ids
// from a scan, as `bpfleet misses PROG...` does). Nothing without
// Config.WatchMisses.
func (a *Agent) Watch(ids []uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mw != nil {
		a.mw.explicit = append([]uint32(nil), ids...)
	}
}

// state is the watcher's part of a snapshot.
func (m *missWatch) state() MissWatch {
	s := MissWatch{Available: m.w != nil, Reason: m.reason, Slots: m.slots, Budget: m.budget,
		Waiting: append([]uint32(nil), m.waiting...), Samples: m.samples, OverBudget: m.over}
	for id, wp := range m.watched {
		s.Watched = append(s.Watched, WatchedProgram{ProgID: id, ProgName: wp.name, Since: wp.since, Samples: wp.samples, Ranges: wp.rangesFrom})
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
