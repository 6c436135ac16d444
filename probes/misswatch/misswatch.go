// Package misswatch explains recursion misses. The kernel counts a run it
// turned away in the program's per-CPU bpf_prog_stats.misses, from
// notrace code no probe can sit on (bpf_prog_inc_misses_counter, called by
// the trampoline's __bpf_prog_enter_recur and by bpf_trace_run*). What can
// see it is a hardware watchpoint on the counter itself: a perf event of
// type PERF_TYPE_BREAKPOINT (write, 8 bytes) on each CPU's copy, sampling
// the kernel stack of each write. That stack is the stack of the run the
// kernel turned away, and it says why (explain.go).
//
// A CPU has few debug registers (x86: 4, shared with debuggers; arm64:
// 2-16), so only a few programs can be watched at once: the caller arms
// the programs it cares about and learns the limit from ErrNoSlot. Every
// watched write is a debug exception, so each event may take at most
// Budget samples between two Drains (PERF_EVENT_IOC_REFRESH: the kernel
// itself turns the event off past it); the misses it does not sample are
// still in the kernel's counter.
package misswatch

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrNoSlot says a CPU had no free debug register for another watchpoint.
var ErrNoSlot = errors.New("no free hardware watchpoint")

// Options configure a Watcher.
type Options struct {
	// CPUs is the number of possible CPUs (the highest possible CPU + 1).
	CPUs int
	// Budget is how many samples each CPU's event of a program may take
	// between two Drains (default 64).
	Budget int
	// MaxStack bounds the kernel frames kept per sample (default 32).
	MaxStack int
}

// Range is a span of a program's JIT code: [Start, Start+Len).
type Range struct {
	Start uint64
	Len   uint32
}

// Sample is one watched write of a program's miss counter: one miss.
type Sample struct {
	ProgID   uint32
	CPU      int
	PID, TID int
	Time     time.Time
	// Stack is the kernel stack, innermost first (perf's context markers
	// removed); Stack[0] is the instruction after the counter's write.
	Stack []uint64
	// Truncated says Stack reached Options.MaxStack: its outer frames may
	// be cut off, so what is not on it says nothing (Explain's complete).
	Truncated bool
}

// Drained is what one Drain saw of one watched program.
type Drained struct {
	ProgID  uint32
	Samples int
	// Lost counts writes the kernel could not record (ring full).
	Lost uint64
	// Spent says an event of the program ran out of its budget since the
	// last Drain: the watchpoint was off for the rest of that interval.
	Spent bool
}

// Watcher owns the watchpoints.
type Watcher struct {
	opts      Options
	offs      []uint64 // each possible CPU's per-CPU offset
	missesOff uint64   // offsetof(struct bpf_prog_stats, misses)
	progs     map[uint32]*watch
	pageSize  int
}

type watch struct {
	id     uint32
	events []*event
}

type event struct {
	fd    int // -1 once the kernel refused to open it again
	cpu   int
	addr  uint64
	mem   []byte
	added uint64 // overflow limits granted by IOC_REFRESH
	used  uint64 // samples and lost records seen
}

// ringPages is each event's ring buffer (data pages, a power of two): at
// the default budget of 64 samples of up to 33 frames (~330 bytes each),
// 21 KB fit in 8 pages between two drains.
const ringPages = 8

// New learns where the miss counters live and checks that the kernel
// lets this process watch kernel memory. An error wrapping
// ebpf.ErrNotSupported says, in the kernel's words, why it cannot.
func New(o Options) (*Watcher, error) {
	if o.CPUs <= 0 {
		return nil, fmt.Errorf("miss watcher: %d CPUs", o.CPUs)
	}
	if o.Budget <= 0 {
		o.Budget = 64
	}
	if o.MaxStack <= 0 {
		o.MaxStack = 32
	}
	w := &Watcher{opts: o, progs: map[uint32]*watch{}, pageSize: unix.Getpagesize()}
	probe, err := w.learn()
	if err != nil {
		return nil, err
	}
	// A watchpoint on kernel memory the agent owns (its learning map):
	// the kernel's answer here is its answer for every program.
	fd, err := openBreakpoint(probe, 0, o.MaxStack)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return nil, fmt.Errorf("%w: every debug register of CPU 0 is in use", ErrNoSlot)
		}
		return nil, fmt.Errorf("%w: perf_event_open of a hardware watchpoint on kernel memory: %w", ebpf.ErrNotSupported, err)
	}
	unix.Close(fd)
	return w, nil
}

// learn runs the learning program once: each CPU's per-CPU offset and
// where misses sits in bpf_prog_stats. It returns a kernel address the
// agent owns, for New's probe.
func (w *Watcher) learn() (uint64, error) {
	spec, err := loadMisswatch()
	if err != nil {
		return 0, fmt.Errorf("reading miss watcher spec: %w", err)
	}
	if err := spec.Variables["nr_cpus"].Set(uint32(w.opts.CPUs)); err != nil {
		return 0, err
	}
	var objs misswatchObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return 0, fmt.Errorf("%w: loading the miss watcher's offset program: %w", ebpf.ErrNotSupported, err)
	}
	defer objs.Close()
	ret, err := objs.Learn.Run(&ebpf.RunOptions{})
	if err != nil {
		return 0, fmt.Errorf("%w: running the miss watcher's offset program: %w", ebpf.ErrNotSupported, err)
	}
	switch ret {
	case 0:
	case 2:
		return 0, fmt.Errorf("%w: bpf_prog_stats has no misses counter (before Linux 5.12)", ebpf.ErrNotSupported)
	default:
		return 0, fmt.Errorf("%w: the miss watcher could not learn the per-CPU offsets (returned %d)", ebpf.ErrNotSupported, ret)
	}
	if err := objs.misswatchVariables.MissesOff.Get(&w.missesOff); err != nil {
		return 0, fmt.Errorf("reading the misses offset: %w", err)
	}
	var probe uint64
	if err := objs.misswatchVariables.ProbeAddr.Get(&probe); err != nil {
		return 0, fmt.Errorf("reading the probe address: %w", err)
	}
	var o misswatchCpuOffs
	if err := objs.Offs.Lookup(uint32(0), &o); err != nil {
		return 0, fmt.Errorf("reading the per-CPU offsets: %w", err)
	}
	w.offs = append([]uint64(nil), o.Off[:w.opts.CPUs]...)
	return probe, nil
}

// counter is the address of CPU cpu's copy of the miss counter of the
// program whose prog->stats is stats.
func (w *Watcher) counter(stats uint64, cpu int) uint64 {
	return stats + w.offs[cpu] + w.missesOff
}

// Arm watches the program whose prog->stats (the raw __percpu address, from
// the bpf_prog iterator) is stats, on every online CPU. ErrNoSlot: a CPU
// had no free debug register (nothing is left armed).
func (w *Watcher) Arm(id uint32, stats uint64) error {
	if w.progs[id] != nil {
		return nil
	}
	if stats == 0 {
		return fmt.Errorf("program %d: no stats address", id)
	}
	wt := &watch{id: id}
	for cpu := range w.opts.CPUs {
		addr := w.counter(stats, cpu)
		fd, err := openBreakpoint(addr, cpu, w.opts.MaxStack)
		if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENXIO) {
			continue // an offline CPU runs nothing
		}
		if err != nil {
			wt.close()
			if errors.Is(err, unix.ENOSPC) {
				return fmt.Errorf("program %d, CPU %d: %w", id, cpu, ErrNoSlot)
			}
			return fmt.Errorf("watching program %d's miss counter on CPU %d: %w", id, cpu, err)
		}
		ev := &event{fd: fd, cpu: cpu, addr: addr}
		wt.events = append(wt.events, ev)
		if err := w.start(ev); err != nil {
			wt.close()
			return fmt.Errorf("program %d, CPU %d: %w", id, cpu, err)
		}
	}
	w.progs[id] = wt
	return nil
}

// Disarm stops watching a program (nothing if it is not armed).
func (w *Watcher) Disarm(id uint32) {
	if wt := w.progs[id]; wt != nil {
		wt.close()
		delete(w.progs, id)
	}
}

// Close disarms every program.
func (w *Watcher) Close() {
	for id := range w.progs {
		w.Disarm(id)
	}
}

// Drain reads every sample the watchpoints took since the last Drain,
// passing each to fn, and grants each event its budget again. It returns
// what it saw per watched program.
func (w *Watcher) Drain(fn func(Sample)) []Drained {
	var out []Drained
	mono := monotonicNow()
	wall := time.Now()
	for _, wt := range w.progs {
		d := Drained{ProgID: wt.id}
		for _, ev := range wt.events {
			if ev.mem == nil {
				continue // refused when reopened
			}
			n, lost := ev.read(func(s Sample) {
				s.ProgID = wt.id
				s.Time = wall.Add(-time.Duration(mono - uint64(s.Time.UnixNano())))
				fn(s)
			}, w.opts.MaxStack)
			d.Samples += n
			d.Lost += lost
			ev.used += uint64(n) + lost
			if ev.used >= ev.added {
				// Spent: the kernel turned the event off (and may have
				// counted its limit past zero while that was pending,
				// so a refresh cannot be trusted to enable it again).
				// A new event takes the next interval's budget; one
				// the kernel refuses now leaves that CPU unwatched and
				// its misses unexplained.
				d.Spent = true
				_ = w.reopen(ev)
				continue
			}
			if left, b := ev.added-ev.used, uint64(w.opts.Budget); left < b {
				_ = ev.refill(b - left)
			}
		}
		out = append(out, d)
	}
	return out
}

// start maps an opened event's ring and enables it with its budget.
func (w *Watcher) start(ev *event) (err error) {
	ev.mem, err = unix.Mmap(ev.fd, 0, (1+ringPages)*w.pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping the watchpoint's ring: %w", err)
	}
	ev.added, ev.used = 0, 0
	if err := ev.refill(uint64(w.opts.Budget)); err != nil {
		return fmt.Errorf("enabling the watchpoint: %w", err)
	}
	return nil
}

// reopen replaces a spent event by a new one on the same counter.
func (w *Watcher) reopen(ev *event) error {
	ev.close()
	fd, err := openBreakpoint(ev.addr, ev.cpu, w.opts.MaxStack)
	if err != nil {
		ev.fd = -1
		return err
	}
	ev.fd = fd
	return w.start(ev)
}

func (wt *watch) close() {
	for _, ev := range wt.events {
		ev.close()
	}
	wt.events = nil
}

func (ev *event) close() {
	if ev.mem != nil {
		unix.Munmap(ev.mem)
		ev.mem = nil
	}
	if ev.fd >= 0 {
		unix.Close(ev.fd)
	}
}

// refill lets the event take n more samples (and enables it): past its
// limit the kernel disables the event by itself, in the exception.
func (ev *event) refill(n uint64) error {
	if n == 0 {
		return nil
	}
	if err := unix.IoctlSetInt(ev.fd, unix.PERF_EVENT_IOC_REFRESH, int(n)); err != nil {
		return err
	}
	ev.added += n
	return nil
}

// sampleType is what each sample records, in this order in the record.
const sampleType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_CALLCHAIN

// openBreakpoint opens a disabled write watchpoint of 8 bytes at a kernel
// address on one CPU, sampling every hit with its kernel stack, time-
// stamped by CLOCK_MONOTONIC.
func openBreakpoint(addr uint64, cpu, maxStack int) (int, error) {
	attr := unix.PerfEventAttr{
		Type:             unix.PERF_TYPE_BREAKPOINT,
		Size:             uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:           1,
		Sample_type:      sampleType,
		Bits:             unix.PerfBitDisabled | unix.PerfBitExcludeCallchainUser | unix.PerfBitUseClockID,
		Clockid:          unix.CLOCK_MONOTONIC,
		Bp_type:          hwBreakpointW,
		Ext1:             addr,
		Ext2:             8,
		Sample_max_stack: uint16(maxStack + 1), // + perf's kernel context marker
	}
	return unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// hwBreakpointW is HW_BREAKPOINT_W (linux/hw_breakpoint.h), which x/sys
// does not name.
const hwBreakpointW = 2
