package misswatch

import "strings"

// Guard is the guard that turned a program's run away, which follows from
// its attach type.
type Guard int

const (
	// GuardProg is the program's own per-CPU recursion guard: the
	// trampoline family (fentry, fexit, fmod_ret, lsm, their sleepable
	// forms) and raw tracepoints (raw_tp, tp_btf).
	GuardProg Guard = iota
	// GuardActive is the CPU's bpf_prog_active, taken by kprobe,
	// tracepoint and perf_event programs: anything holding it turns them
	// away.
	GuardActive
)

// Frame is one frame of a sampled stack, as the caller resolved it.
type Frame struct {
	Addr uint64
	// Sym is the kernel symbol the address falls in ("" when unknown).
	Sym string
	// Own says the address is in the watched program's own JIT code, at
	// OwnOff bytes into the function (main program or subprogram) that
	// holds it.
	Own    bool
	OwnOff uint64
}

// The causes and contexts Explain returns (the agent's closed sets).
const (
	CauseRecursion = "recursion"
	CauseInterrupt = "interrupt"
	CausePreempted = "preempted"
	CauseNested    = "nested"

	ContextTask    = "task"
	ContextSoftirq = "softirq"
	ContextHardirq = "hardirq"
	ContextNMI     = "nmi"
)

// Explain says why the run whose stack this is was turned away, and in
// which context it ran. The stack is innermost first, from the counter's
// write outwards. complete says whether what is absent from the stack
// means something: the program's JIT ranges were known (whatever the
// source), the stack is whole (not cut at the sample's frame limit) and
// its frames are named (an unnamed interrupt entry or guard frame would go
// unseen). Otherwise the absence of an Own frame says nothing.
//
//   - recursion: the program's own code lies between the miss and the
//     nearest interrupt entry (or there is none): the program re-entered
//     itself in one context, through whatever it called.
//   - interrupt: an interrupt entry (hardirq, softirq, NMI) lies between
//     the miss and the program's own code (either guard), or, for the
//     per-program guard, between the miss and a guard frame of the
//     interrupted context (the trampoline's enter/exit, bpf_trace_run):
//     the interrupted context held the guard.
//   - preempted (per-program guard): no holder on this CPU's stack: the
//     guard is held by a task that is switched out or asleep.
//   - nested (bpf_prog_active): the program's own code is not below the
//     miss in its context: something else held the CPU's bpf_prog_active.
//
// preempted and nested are read from the program's code being absent, so
// they need complete: without it Explain returns cause "" (unexplained),
// never a cause inferred from what it could not see (the 7.2 arm64 guest
// cut a timer interrupt's stack inside the softirq it interrupted, 32
// frames above the program's own code).
func Explain(stack []Frame, g Guard, complete bool) (cause, context string) {
	own, entry := -1, -1
	context = ContextTask
	for i, f := range stack {
		if own < 0 && f.Own {
			own = i
		}
		if entry < 0 {
			if c := entryContext(f.Sym); c != "" {
				entry, context = i, c
			}
		}
	}
	switch {
	case own >= 0 && (entry < 0 || own < entry):
		return CauseRecursion, context
	case own >= 0:
		// The program's own code under an interrupt entry: the interrupted
		// context was inside the program, whichever guard turned it away.
		return CauseInterrupt, context
	case g == GuardProg && entry >= 0 && guardFrameBelow(stack[entry+1:]):
		return CauseInterrupt, context
	case !complete:
		return "", context
	case g == GuardActive:
		return CauseNested, context
	}
	return CausePreempted, context
}

// guardFrameBelow says whether an interrupted context's frames show it
// inside a program's guard: the trampoline's enter or exit, or a raw
// tracepoint's run.
func guardFrameBelow(frames []Frame) bool {
	inEntry := true // the rest of the interrupt's own entry frames
	for _, f := range frames {
		if entryContext(f.Sym) != "" {
			if inEntry {
				continue
			}
			return false // the next context out: not the interrupted one
		}
		inEntry = false
		s := f.Sym
		if strings.HasPrefix(s, "__bpf_prog_enter") || strings.HasPrefix(s, "__bpf_prog_exit") ||
			strings.HasPrefix(s, "bpf_trace_run") || strings.HasPrefix(s, "__bpf_trace_run") ||
			strings.HasPrefix(s, "bpf_trampoline_") {
			return true
		}
	}
	return false
}

// entryContext names the context a frame enters, or "" for an ordinary
// frame: the kernel's interrupt entry points on x86-64 and arm64. Only
// entry points count, not functions that also run elsewhere (an hrtimer
// callback runs in hardirq or in softirq).
func entryContext(sym string) string {
	if sym == "" {
		return ""
	}
	switch sym {
	case "asm_exc_nmi", "exc_nmi", "default_do_nmi", "nmi_handle", "do_nmi",
		"arm64_enter_nmi", "__el1_pnmi", "el1h_64_fiq", "el1h_64_fiq_handler":
		return ContextNMI
	case "handle_softirqs", "__do_softirq", "do_softirq", "run_ksoftirqd":
		return ContextSoftirq
	case "asm_common_interrupt", "common_interrupt", "handle_irq_event", "handle_irq_event_percpu",
		"__handle_irq_event_percpu", "hrtimer_interrupt", "gic_handle_irq", "el1_interrupt",
		"el0_interrupt", "el1h_64_irq", "el1h_64_irq_handler", "el0t_64_irq", "el0t_64_irq_handler",
		"do_interrupt_handler", "generic_handle_domain_irq", "handle_domain_irq", "ipi_handler",
		"do_handle_IPI", "__irq_exit_rcu", "irq_exit_rcu":
		return ContextHardirq
	}
	if strings.HasPrefix(sym, "asm_sysvec_") || strings.HasPrefix(sym, "sysvec_") || strings.HasPrefix(sym, "__sysvec_") {
		return ContextHardirq
	}
	return ""
}
