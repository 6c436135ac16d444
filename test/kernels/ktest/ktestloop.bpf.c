//go:build ignore

// The kernel-matrix test program that needs bpf_loop (Linux 5.17), apart
// from ktest.bpf.c: a 5.10 verifier refuses every program of an object
// whose BTF has a bpf_loop callback ("number of funcs in func_info doesn't
// match number of subprogs"), so the others would be refused with it.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// The interrupt scenario: one raw_tp program attached to two tracepoints,
// sys_enter (task context) and hrtimer_expire_entry (the tick's timer, in
// hardirq). When the test's spinning thread (spin_tid) enters the syscall
// spin_nr, the program spins with its per-CPU guard held; every timer that
// expires on that CPU meanwhile runs the same program from the interrupt,
// and the guard turns it away: a miss with an interrupt entry between it
// and the program's own code on the stack. The two tracepoints' second
// arguments tell them apart: a syscall number, a kernel pointer.
__u32 spin_tid;
__u64 spin_nr;
__u64 spins;

static long spin_step(__u64 i, void *ctx)
{
	return 0;
}

SEC("raw_tp")
int spin_or_tick(struct bpf_raw_tracepoint_args *ctx)
{
	if (ctx->args[1] != spin_nr || spin_tid == 0 || (__u32)bpf_get_current_pid_tgid() != spin_tid)
		return 0;
	__sync_fetch_and_add(&spins, 1);
	bpf_loop(1 << 23, spin_step, NULL, 0);
	return 0;
}
