package misswatch

import (
	"encoding/binary"
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
	}{
		{"fentry deleting from its own target (7.2 guest)", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_6442", "htab_map_delete_elem", "OWN", "bpf_trampoline_6442", "htab_map_delete_elem", "map_delete_elem", "__sys_bpf", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), GuardProg, CauseRecursion, ContextTask},
		{"tp_btf calling bpf_trace_printk", frames("bpf_prog_inc_misses_counter", "bpf_trace_run2", "__bpf_trace_bpf_trace_printk", "bpf_trace_printk", "OWN", "bpf_trace_run2", "bpf_trace_printk", "do_syscall_64"), GuardProg, CauseRecursion, ContextTask},
		{"timer interrupt on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "trace_hrtimer_expire_entry", "__hrtimer_run_queues", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "OWN", "bpf_trace_run2", "do_syscall_64"), GuardProg, CauseInterrupt, ContextHardirq},
		{"softirq on the program", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_1", "kfree_skb", "net_rx_action", "handle_softirqs", "__irq_exit_rcu", "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "OWN", "bpf_trampoline_1"), GuardProg, CauseInterrupt, ContextSoftirq},
		{"interrupt inside the trampoline's enter, before the program", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_recur", "bpf_trampoline_1", "tick_sched_timer", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt", "__bpf_prog_enter_recur", "bpf_trampoline_1", "do_syscall_64"), GuardProg, CauseInterrupt, ContextHardirq},
		{"NMI on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "perf_event_nmi_handler", "nmi_handle", "default_do_nmi", "exc_nmi", "asm_exc_nmi", "OWN"), GuardProg, CauseInterrupt, ContextNMI},
		{"holder switched out (sleepable, blocked)", frames("bpf_prog_inc_misses_counter", "__bpf_prog_enter_sleepable_recur", "bpf_trampoline_9", "__x64_sys_getpgid", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"), GuardProg, CausePreempted, ContextTask},
		{"holder preempted, interrupt elsewhere in the kernel", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt", "asm_sysvec_apic_timer_interrupt", "pv_native_safe_halt", "default_idle"), GuardProg, CausePreempted, ContextHardirq},
		{"kprobe under a map update from a syscall", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "kprobe_dispatcher", "kprobe_ftrace_handler", "htab_map_update_elem", "bpf_map_update_value", "__sys_bpf", "do_syscall_64"), GuardActive, CauseNested, ContextTask},
		{"kprobe re-entered by its own helper call", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "kprobe_dispatcher", "htab_map_delete_elem", "OWN", "trace_call_bpf", "kprobe_perf_func", "__x64_sys_getpgid"), GuardActive, CauseRecursion, ContextTask},
		{"kprobe in an interrupt over another kprobe program", frames("bpf_prog_inc_misses_counter", "kprobe_perf_func", "irq_work_run", "__sysvec_irq_work", "asm_sysvec_irq_work", "OWN"), GuardActive, CauseNested, ContextHardirq},
		{"arm64 irq on the program", frames("bpf_prog_inc_misses_counter", "bpf_trace_run1", "__hrtimer_run_queues", "hrtimer_interrupt", "arch_timer_handler_virt", "handle_percpu_devid_irq", "generic_handle_domain_irq", "gic_handle_irq", "call_on_irq_stack", "do_interrupt_handler", "el1_interrupt", "el1h_64_irq_handler", "el1h_64_irq", "OWN"), GuardProg, CauseInterrupt, ContextHardirq},
		{"no symbols: own code still tells recursion", []Frame{{Addr: 1}, {Addr: 2}, {Addr: 3, Own: true}, {Addr: 4}}, GuardProg, CauseRecursion, ContextTask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, ctx := Explain(tc.stack, tc.guard)
			if cause != tc.cause || ctx != tc.context {
				t.Errorf("Explain = %s in %s, want %s in %s", cause, ctx, tc.cause, tc.context)
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
	if s, _ := decodeSample(rec(kernelMarker, 1, 2, 3, 4), 2); len(s.Stack) != 2 {
		t.Errorf("stack %x: want 2 frames at most", s.Stack)
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
