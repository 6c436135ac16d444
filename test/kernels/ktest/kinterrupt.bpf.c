//go:build ignore

// The bpf_prog_active interrupt scenario (interrupt_test.go): one
// tracepoint program (guarded, as kprobe and perf_event programs are, by
// the CPU's bpf_prog_active) attached twice through perf events: on
// task:task_rename (attach cookie 1) and on timer:hrtimer_expire_entry
// (the tick's timer, in hardirq). When the test's thread (tspin_tid)
// renames itself the program spins holding bpf_prog_active; every timer
// that expires on that CPU meanwhile reaches the same program from the
// interrupt and is turned away: a miss with an interrupt entry between it
// and the program's own code. Not kprobes: the kprobe framework drops a
// kprobe hit inside another kprobe's handler before any program runs. Not
// a syscall tracepoint: on 7.2 their programs run without bpf_prog_active
// (measured: timers on the spinning CPU ran the program 42 times).
// Apart from ktest.bpf.c so that its own object changes with it alone.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

__u32 tspin_tid;
__u64 tspins;
// Timer runs of the program on the spinning CPU that the guard let through
// while it spun (the kernel held no bpf_prog_active for the spin): what
// tells a kernel that guards no such nesting from a broken scenario.
__u64 tticks_through;
__u32 tspinning;
__u32 tspin_cpu;

static long tspin_step(__u64 i, void *ctx)
{
	return 0;
}

SEC("tracepoint")
int tspin_or_tick(void *ctx)
{
	if (bpf_get_attach_cookie(ctx) != 1) {
		if (tspinning && bpf_get_smp_processor_id() == tspin_cpu)
			__sync_fetch_and_add(&tticks_through, 1);
		return 0;
	}
	if (tspin_tid == 0 || (__u32)bpf_get_current_pid_tgid() != tspin_tid)
		return 0;
	__sync_fetch_and_add(&tspins, 1);
	tspin_cpu = bpf_get_smp_processor_id();
	tspinning = 1;
	bpf_loop(1 << 23, tspin_step, NULL, 0);
	tspinning = 0;
	return 0;
}
