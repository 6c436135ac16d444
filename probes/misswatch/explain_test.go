package misswatch

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// frames builds a stack from names, innermost first; "OWN" marks the
// watched program's own JIT code.
func frames(names ...string) []Frame {
	out := make([]Frame, len(names))
	for i, n := range names {
		out[i] = Frame{Addr: uint64(0x1000 + i), Sym: n, Own: n == "OWN"}
	}
	return out
}

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		name           string
		stack          []Frame
		guard          Guard
		cause, context string
		// hidden: what is absent from the stack says nothing (no source
		// gave the program's ranges, the stack was cut at the frame
		// limit, or its frames are not named).
		hidden bool
	}{
		{"fentry deleting from its own target (7.2 guest)", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_6442", "htab_map_delete_elem", "OWN", "bpf_trampoline_6442", "htab_map_delete_elem", "map_delete_elem", "__sys_bpf", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), GuardProg, CauseRecursion, ContextTask, false},
		{"tp_btf calling bpf_trace_printk", frames("bpf_prog_inc_misses_counter", "bpf_trace_run2", "__bpf_trace_bpf_trace_printk", "bpf_trace_printk", "OWN", "bpf_trace_run2", "bpf_trace_printk", "do_syscall_64"), GuardProg, CauseRecursion, ContextTask, false},
		{"timer interrupt on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "trace_hrtimer_expire_entry", "__hrtimer_run_queues", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "OWN", "bpf_trace_run2", "do_syscall_64"), GuardProg, CauseInterrupt, ContextHardirq, false},
		{"softirq on the program", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_1", "kfree_skb", "net_rx_action", "handle_softirqs", "__irq_exit_rcu", "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "OWN", "bpf_trampoline_1"), GuardProg, CauseInterrupt, ContextSoftirq, false},
		{"interrupt inside the trampoline's enter, before the program", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_1", "tick_sched_timer", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "__bpf_prog_enter_recur", "bpf_trampoline_1", "do_syscall_64"), GuardProg, CauseInterrupt, ContextHardirq, false},
		{"NMI on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "perf_event_nmi_handler", "nmi_handle", "default_do_nmi", "exc_nmi", "asm_exc_nmi", "OWN"), GuardProg, CauseInterrupt, ContextNMI, false},
		{"holder switched out (sleepable, blocked)", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_sleepable_recur", "bpf_trampoline_9", "__x64_sys_getpgid", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), GuardProg, CausePreempted, ContextTask, false},
		{"holder preempted, interrupt elsewhere in the kernel", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt", "asm_sysvec_apic_timer_interrupt", "pv_native_safe_halt", "default_idle"), GuardProg, CausePreempted, ContextHardirq, false},
		{"kprobe under a map update from a syscall", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "kprobe_dispatcher", "kprobe_ftrace_handler", "htab_map_update_elem", "bpf_map_update_value", "__sys_bpf", "do_syscall_64"), GuardActive, CauseNested, ContextTask, false},
		{"kprobe re-entered by its own helper call", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "kprobe_dispatcher", "htab_map_delete_elem", "OWN", "trace_call_bpf", "kprobe_perf_func", "__x64_sys_getpgid"), GuardActive, CauseRecursion, ContextTask, false},
		{"kprobe in an interrupt over its own code", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "irq_work_run", "__sysvec_irq_work", "asm_sysvec_irq_work", "OWN"), GuardActive, CauseInterrupt, ContextHardirq, false},
		{"kprobe in an interrupt over another kprobe program", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "irq_work_run", "__sysvec_irq_work", "asm_sysvec_irq_work", "bpf_prog_other", "trace_call_bpf"), GuardActive, CauseNested, ContextHardirq, false},
		{"arm64 irq on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "__hrtimer_run_queues", "hrtimer_interrupt", "arch_timer_handler_virt", "handle_percpu_devid_irq", "generic_handle_domain_irq", "gic_handle_irq", "call_on_irq_stack", "do_interrupt_handler", "el1_interrupt", "el1h_64_irq_handler", "el1h_64_irq", "OWN"), GuardProg, CauseInterrupt, ContextHardirq, false},
		{"no symbols: own code still tells recursion", []Frame{{Addr: 1}, {Addr: 2}, {Addr: 3, Own: true}, {Addr: 4}}, GuardProg, CauseRecursion, ContextTask, true},
		// Ranges known but nothing named (kallsyms hidden): an interrupt
		// inside the trampoline's enter would go unseen, so no own frame
		// is not preempted.
		{"no symbols, no own frame: not preempted", []Frame{{Addr: 1}, {Addr: 2}, {Addr: 3}}, GuardProg, "", ContextTask, true},
		{"no symbols, no own frame: not nested", []Frame{{Addr: 1}, {Addr: 2}, {Addr: 3}}, GuardActive, "", ContextTask, true},
		// Where no source gave the program's ranges, what the absence of
		// its code would mean is not said: the 7.2 guest under
		// kptr_restrict=2 read 12 recursion misses as preempted.
		{"ranges hidden: recursion is not read as preempted", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_6442", "htab_map_delete_elem", "", "bpf_trampoline_6442", "htab_map_delete_elem", "map_delete_elem", "__sys_bpf", "do_syscall_64"), GuardProg, "", ContextTask, true},
		{"ranges hidden: kprobe recursion is not read as nested", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "kprobe_dispatcher", "htab_map_delete_elem", "", "trace_call_bpf", "kprobe_perf_func", "__x64_sys_getpgid"), GuardActive, "", ContextTask, true},
		{"ranges hidden, nothing named either", []Frame{{Addr: 1}, {Addr: 2}, {Addr: 3}}, GuardProg, "", ContextTask, true},
		// A stack cut at the frame limit inside a softirq that ran at an
		// earlier interrupt's exit (7.2 arm64): the program's code below
		// the cut is not seen, so this is not nested.
		{"stack cut above the program: not nested", frames("bpf_prog_inc_misses_counter", "perf_trace_run_bpf_submit", "perf_trace_hrtimer_expire_entry", "__hrtimer_run_queues", "hrtimer_interrupt", "gic_handle_irq", "el1_interrupt", "el1h_64_irq_handler", "el1h_64_irq", "wake_up_process", "call_timer_fn", "run_timer_softirq", "handle_softirqs", "__irq_exit_rcu", "irq_exit_rcu"), GuardActive, "", ContextHardirq, true},
		{"ranges hidden: an interrupt inside the guard is still seen", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_1", "tick_sched_timer", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "__bpf_prog_enter_recur", "bpf_trampoline_1", "do_syscall_64"), GuardProg, CauseInterrupt, ContextHardirq, true},
		{"ranges hidden: an interrupt elsewhere says nothing", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "try_to_wake_up", "hrtimer_interrupt", "asm_sysvec_apic_timer_interrupt", "pv_native_safe_halt"), GuardProg, "", ContextHardirq, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, ctx := Explain(tc.stack, tc.guard, !tc.hidden)
			if cause != tc.cause || ctx != tc.context {
				t.Errorf("Explain = %q in %s, want %q in %s (\"\": unexplained)", cause, ctx, tc.cause, tc.context)
			}
		})
	}
}

func TestDecodeSample(t *testing.T) {
	le := binary.LittleEndian
	rec := func(ips ...uint64) []byte {
		b := make([]byte, 40+8*len(ips))
		le.PutUint64(b, 0xffffffff81000010)
		le.PutUint32(b[8:], 100)
		le.PutUint32(b[12:], 101)
		le.PutUint64(b[16:], 5e9)
		le.PutUint32(b[24:], 1)
		le.PutUint64(b[32:], uint64(len(ips)))
		for i, ip := range ips {
			le.PutUint64(b[40+8*i:], ip)
		}
		return b
	}
	kernelMarker := uint64(0xffffffffffffff80) // PERF_CONTEXT_KERNEL
	s, ok := decodeSample(rec(kernelMarker, 0xffffffff81000010, 0xffffffff81000020, 0xffffffffa0000000), 32)
	if !ok || s.PID != 100 || s.TID != 101 || s.CPU != 1 || s.Time.UnixNano() != 5e9 {
		t.Fatalf("decoded %+v ok=%v", s, ok)
	}
	if len(s.Stack) != 3 || s.Stack[0] != 0xffffffff81000010 || s.Stack[2] != 0xffffffffa0000000 {
		t.Errorf("stack %x: want the three frames without the context marker", s.Stack)
	}
	if s.Truncated {
		t.Errorf("a stack of 3 frames under a cap of 32 called truncated")
	}
	if s, _ := decodeSample(rec(kernelMarker, 1, 2, 3, 4), 2); len(s.Stack) != 2 || !s.Truncated {
		t.Errorf("stack %x truncated %v: want 2 frames at most, truncated", s.Stack, s.Truncated)
	}
	if _, ok := decodeSample(rec(1, 2)[:48], 32); ok {
		t.Error("a record shorter than its callchain decoded")
	}
}

func TestSymbols(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kallsyms")
	os.WriteFile(path, []byte(strings.Join([]string{
		"ffffffff81000000 T _stext",
		"ffffffff81000100 T htab_map_delete_elem",
		"ffffffff81000300 t __bpf_prog_enter_recur",
		"ffffffffc0000000 t bpf_prog_6deef7357e7b4530_recur\t[bpf]",
		"ffffffffa0000000 t fn_in_mod\t[nf_tables]",
	}, "\n")+"\n"), 0o644)
	s := NewSymbols(path)
	s.Resolve([]uint64{0xffffffff81000104, 0xffffffff81000300, 0xffffffffc0000020, 0xffffffffa0000008, 0xffffffffb0000000})
	for addr, want := range map[uint64]string{
		0xffffffff81000104: "htab_map_delete_elem+0x4",
		0xffffffff81000300: "__bpf_prog_enter_recur+0x0",
		0xffffffffc0000020: "bpf_prog_6deef7357e7b4530_recur [bpf]+0x20",
		0xffffffffa0000008: "fn_in_mod [nf_tables]+0x8",
		0xffffffffb0000000: "", // 256 MB past the module: named by nothing
	} {
		if got := s.Name(addr); got != want {
			t.Errorf("Name(%x) = %q, want %q", addr, got, want)
		}
	}
	if BaseName(s.Name(0xffffffff81000104)) != "htab_map_delete_elem" {
		t.Error("BaseName kept the offset")
	}
	zero := filepath.Join(dir, "restricted")
	os.WriteFile(zero, []byte("0000000000000000 T _stext\n0000000000000000 T htab_map_delete_elem\n"), 0o644)
	r := NewSymbols(zero)
	r.Resolve([]uint64{1})
	if r.Err == nil || !strings.Contains(r.Err.Error(), "CAP_SYSLOG") {
		t.Errorf("restricted kallsyms: err %v, want one naming CAP_SYSLOG", r.Err)
	}
}

// TestSymbolsCheck: whether kallsyms names anything is known before the
// first miss, zeros (hidden addresses) and an unreadable file alike.
func TestSymbolsCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	for _, tc := range []struct {
		name, path string
		want       string // substring of Err, "" for none
	}{
		{"addresses shown", write("shown", "0000000000000000 A fixed_percpu_data\nffffffff81000000 T _stext\n"), ""},
		{"kptr_restrict=2: every address zero", write("zeros", "0000000000000000 T _stext\n0000000000000000 T htab_map_delete_elem\n"), "CAP_SYSLOG"},
		{"empty", write("empty", ""), "shows no addresses"},
		{"unreadable", filepath.Join(dir, "missing"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewSymbols(tc.path).Check()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Check() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSymbolSource: the watcher's `symbols:` says what really names frames,
// never kallsyms where kallsyms reads zeros.
func TestSymbolSource(t *testing.T) {
	hidden := NewSymbols("/nonexistent").Check()
	for _, tc := range []struct {
		kallsyms error
		ranges   bool
		want     string
	}{
		{nil, true, SymbolsKallsyms},
		{nil, false, SymbolsKallsyms},
		{hidden, true, SymbolsRangesOnly},
		{hidden, false, SymbolsNone},
	} {
		if got := SymbolSource(tc.kallsyms, tc.ranges); got != tc.want {
			t.Errorf("SymbolSource(%v, ranges %v) = %q, want %q", tc.kallsyms, tc.ranges, got, tc.want)
		}
	}
}

// TestRangerUnseen: a program's own code is unseen only where kallsyms
// (and so jited_ksyms) hides addresses and the iterator is refused.
func TestRangerUnseen(t *testing.T) {
	hidden := NewSymbols("/nonexistent").Check()
	refused := errors.New("verifier rejected the iterator")
	for _, tc := range []struct {
		name     string
		kallsyms error
		r        *Ranger
		unseen   bool
	}{
		{"kallsyms shown", nil, &Ranger{loaded: true, IterErr: refused}, false},
		{"hidden, iterator loaded", hidden, &Ranger{loaded: true, it: &rangeIter{}}, false},
		{"hidden, iterator refused", hidden, &Ranger{loaded: true, IterErr: refused}, true},
		{"hidden, jited_ksyms gave ranges before", hidden, &Ranger{loaded: true, IterErr: refused, ksymsShown: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Unseen(tc.kallsyms)
			if (err != nil) != tc.unseen || err != nil && !strings.Contains(err.Error(), refused.Error()) {
				t.Errorf("Unseen = %v, want unseen %v with the iterator's refusal", err, tc.unseen)
			}
			if got, want := SymbolSource(tc.kallsyms, err == nil), map[bool]string{true: SymbolsNone, false: SymbolsRangesOnly}[tc.unseen]; tc.kallsyms != nil && got != want {
				t.Errorf("symbols %q, want %q", got, want)
			}
		})
	}
}

// TestFramesOwn: an address in one of the program's functions is its own,
// named by its offset into that function; one past the end is not.
func TestFramesOwn(t *testing.T) {
	ranges := []Range{{Start: 0x1000, Len: 0x40}, {Start: 0x2000, Len: 0x10}}
	got := Frames([]uint64{0x1004, 0x2008, 0x1040, 0x3000}, ranges, nil)
	want := []Frame{{Addr: 0x1004, Own: true, OwnOff: 4}, {Addr: 0x2008, Own: true, OwnOff: 8}, {Addr: 0x1040}, {Addr: 0x3000}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
