package ktest

import (
	"runtime"
	"testing"

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
	spin := func() {
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
			if err := objs.SpinTid.Set(uint32(unix.Gettid())); err != nil {
				done <- err
				return
			}
			unix.Getppid()
			done <- objs.SpinTid.Set(uint32(0))
		}()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	snap, p := explain.Observe(t, ProgramID(t, objs.Prog), spin)
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
