package ktest

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/explain"
)

// TestInterruptMiss: a raw_tp program spinning in a syscall's sys_enter on
// CPU 0 is hit by the timer interrupts of that CPU, which run the same
// program (attached to hrtimer_expire_entry too) and are turned away. The
// watcher must explain those misses as interrupt, in hardirq (or softirq)
// context, never as recursion; the causes add up to the kernel's count.
// Where the spinner can be preempted, misses with the holder switched out
// are preempted (the guard's holder is not on the interrupted stack).
// How many ticks land in the spin is the kernel's: the count is not fixed.
func TestInterruptMiss(t *testing.T) {
	var objs struct {
		Prog    *ebpf.Program  `ebpf:"spin_or_tick"`
		SpinTid *ebpf.Variable `ebpf:"spin_tid"`
		SpinNr  *ebpf.Variable `ebpf:"spin_nr"`
		Spins   *ebpf.Variable `ebpf:"spins"`
	}
	loadSpec(t, expect.FeatLoop, loadKtestloop, &objs)
	closeAll(t, objs.Prog)
	if err := objs.SpinNr.Set(uint64(unix.SYS_GETPPID)); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{"sys_enter", "hrtimer_expire_entry"} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: objs.Prog})
		if err != nil {
			t.Fatalf("attaching to raw tracepoint %s: %v", tp, err)
		}
		closeAll(t, l)
	}
	snap, p := explain.Observe(t, ProgramID(t, objs.Prog), func() {
		onCPU0(t, func() error {
			if err := objs.SpinTid.Set(uint32(unix.Gettid())); err != nil {
				return err
			}
			unix.Getppid()
			return objs.SpinTid.Set(uint32(0))
		})
	})
	var spins uint64
	objs.Spins.Get(&spins)
	if spins != 1 {
		t.Fatalf("the program spun %d times for one getppid", spins)
	}
	c := p.DeltaCauses
	if c.Sum() != p.Delta.Misses || c.Recursion != 0 || c.Interrupt == 0 {
		t.Errorf("causes %+v of %d misses: want some interrupt, no recursion, adding up", c, p.Delta.Misses)
	}
	// A timer may also fire while the spinner is switched out (PREEMPT_RT
	// runs timers in ktimers/ksoftirqd threads that preempt it, measured
	// 8 of 116): that miss is in hardirq context too, but the guard's
	// holder is not on the stack, so it is preempted, not interrupt.
	for _, s := range snap.Misses {
		if s.Context != agent.ContextTask && s.Cause != agent.CauseInterrupt && s.Cause != agent.CausePreempted {
			t.Errorf("a miss in %s context explained as %s", s.Context, s.Cause)
		}
	}
	t.Logf("%d misses in the spin: %+v", p.Delta.Misses, c)
}

// onCPU0 runs fn on a thread pinned to CPU 0.
func onCPU0(t *testing.T, fn func() error) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestInterruptMissActive: the interrupt case for programs the CPU's
// bpf_prog_active guards (kprobe, tracepoint, perf_event). A tracepoint
// program spinning in task_rename on CPU 0 holds bpf_prog_active, and the
// timers of that CPU reach the same program (hrtimer_expire_entry) and are
// turned away. Its own code lies under the interrupt entry on each miss's
// stack: interrupt, as docs/misses.md defines it, in hardirq context;
// never nested (which says another holder) or recursion. The spinning
// thread's id is set before the watched interval and cleared after it, so
// no map update (which holds bpf_prog_active too) falls inside it. Where
// watchpoints do not fire for these misses nothing is sampled: a skip
// there, a failure where the matrix measured them firing.
func TestInterruptMissActive(t *testing.T) {
	var objs struct {
		Prog    *ebpf.Program  `ebpf:"tspin_or_tick"`
		SpinTid *ebpf.Variable `ebpf:"tspin_tid"`
		Spins   *ebpf.Variable `ebpf:"tspins"`
		Through *ebpf.Variable `ebpf:"tticks_through"`
	}
	spec, err := loadKinterrupt()
	if err != nil {
		t.Fatalf("reading kinterrupt spec: %v", err)
	}
	// The scenario needs the kernel to count these programs' misses
	// (6.7+, as for kprobes), and its spin bpf_loop (5.17+).
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		expect.SkipUnlessExpected(t, expect.FeatKprobeMissed, fmt.Errorf("loading: %w", err))
	}
	closeAll(t, objs.Prog)
	for _, site := range []struct {
		group, name string
		cookie      uint64
	}{{"task", "task_rename", 1}, {"timer", "hrtimer_expire_entry", 0}} {
		l, err := link.Tracepoint(site.group, site.name, objs.Prog, &link.TracepointOptions{Cookie: site.cookie})
		if err != nil {
			expect.SkipUnlessExpected(t, expect.FeatKprobeMissed, fmt.Errorf("attaching to tracepoint %s:%s: %w", site.group, site.name, err))
		}
		closeAll(t, l)
	}
	// The spinning thread, pinned to CPU 0, waits for the trigger.
	tids, trigger, done := make(chan int), make(chan struct{}), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			tids <- -1
			done <- err
			return
		}
		tids <- unix.Gettid()
		<-trigger
		name := []byte("ktest-spin\x00")
		done <- unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	}()
	tid := <-tids
	if tid < 0 {
		t.Fatal(<-done)
	}
	var release sync.Once
	t.Cleanup(func() {
		// A test that ended before the trigger (a skip) lets the thread
		// go without spinning.
		objs.SpinTid.Set(uint32(0))
		release.Do(func() { close(trigger) })
	})
	if err := objs.SpinTid.Set(uint32(tid)); err != nil {
		t.Fatal(err)
	}
	id := ProgramID(t, objs.Prog)
	snap, p := explain.Observe(t, id, func() {
		release.Do(func() { close(trigger) })
		if err := <-done; err != nil {
			t.Fatalf("renaming the spinning thread: %v", err)
		}
	})
	objs.SpinTid.Set(uint32(0))
	var spins, through uint64
	objs.Spins.Get(&spins)
	objs.Through.Get(&through)
	if spins != 1 {
		t.Fatalf("the program spun %d times for one rename", spins)
	}
	c := p.DeltaCauses
	if p.Delta.Misses == 0 {
		expect.SkipUnlessExpected(t, expect.FeatKprobeMissed, fmt.Errorf("no miss counted for timers over a spinning tracepoint program (%d timer runs on its CPU let through)", through))
	}
	if c.Sum()-c.Unexplained == 0 && !expect.Expected(expect.FeatMissWatchKprobe) {
		expect.SkipUnlessExpected(t, expect.FeatMissWatchKprobe, fmt.Errorf("the watchpoint sampled none of %d misses counted under bpf_prog_active", p.Delta.Misses))
	}
	if c.Interrupt == 0 || c.Nested != 0 || c.Recursion != 0 || c.Preempted != 0 {
		t.Errorf("causes %+v of %d misses: want interrupt, none nested, recursion or preempted", c, p.Delta.Misses)
	}
	for _, s := range snap.Misses {
		if s.ProgID == id && (s.Cause != agent.CauseInterrupt || s.Context != agent.ContextHardirq) {
			t.Errorf("a miss explained as %s in %s, want interrupt in hardirq: %q", s.Cause, s.Context, s.Stack)
		}
	}
	t.Logf("%d misses in the spin: %+v; %d timer runs on its CPU let through", p.Delta.Misses, c, through)
}
