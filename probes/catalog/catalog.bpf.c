//go:build ignore

// The probe catalog: one minimal counting program per attach type, plus the
// in-kernel trigger drivers. Every probe counts only the runs caused by one
// thread (target_tid), so while it is attached the rest of the node pays the
// dispatch and one comparison, never the count.
//
// Attach targets in the section names are placeholders: the loader chooses
// the real target at run time (the arch's getpgid syscall wrapper, or
// bpf_get_numa_node_id / bpf_trigger_tp in kernel mode). Each program is
// loaded on its own, so one the kernel refuses never stops the others.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

// The thread whose runs are counted (the kernel's pid, user space's tid).
volatile const __u32 target_tid;
// For sys_enter probes: the syscall number to count (getpgid on this arch).
volatile const __s64 target_nr;
// Helper or kfunc calls per driver test run.
volatile const __u32 batch_iters = 1;

// Runs caused by target_tid. Only that thread passes the filter and a thread
// runs one probe at a time, so a plain increment cannot lose counts.
__u64 hits;

static __always_inline void count(void)
{
	if ((__u32)bpf_get_current_pid_tgid() == target_tid)
		hits++;
}

SEC("fentry/placeholder")
int BPF_PROG(on_fentry)
{
	count();
	return 0;
}

SEC("fexit/placeholder")
int BPF_PROG(on_fexit)
{
	count();
	return 0;
}

// Returning 0 leaves the traced function's return value alone.
SEC("fmod_ret/placeholder")
int BPF_PROG(on_fmod_ret)
{
	count();
	return 0;
}

SEC("fentry.s/placeholder")
int BPF_PROG(on_fentry_s)
{
	count();
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_tp_btf_sys_enter, struct pt_regs *regs, long id)
{
	if (id == target_nr)
		count();
	return 0;
}

// For bpf_trigger_tp in kernel mode: every run is the driver's.
SEC("tp_btf/bpf_trigger_tp")
int BPF_PROG(on_tp_btf)
{
	count();
	return 0;
}

SEC("raw_tp/sys_enter")
int BPF_PROG(on_raw_tp_sys_enter, struct pt_regs *regs, long id)
{
	if (id == target_nr)
		count();
	return 0;
}

SEC("raw_tp/bpf_trigger_tp")
int on_raw_tp(void *ctx)
{
	count();
	return 0;
}

SEC("tracepoint/placeholder")
int on_tracepoint(void *ctx)
{
	count();
	return 0;
}

SEC("kprobe/placeholder")
int on_kprobe(void *ctx)
{
	count();
	return 0;
}

SEC("kretprobe/placeholder")
int on_kretprobe(void *ctx)
{
	count();
	return 0;
}

SEC("kprobe.multi/placeholder")
int on_kprobe_multi(void *ctx)
{
	count();
	return 0;
}

SEC("uprobe/placeholder")
int on_uprobe(void *ctx)
{
	count();
	return 0;
}

// getpgid(pid) with pid != 0 passes through security_task_getpgid; 0 allows.
SEC("lsm/task_getpgid")
int BPF_PROG(on_lsm, struct task_struct *p)
{
	count();
	return 0;
}

// In-kernel trigger drivers, run with BPF_PROG_TEST_RUN in the caller's
// context as in the kernel's trigger bench: no syscall per triggered call,
// so the attach type's dispatch cost is not drowned by syscall entry.

static long call_helper(__u64 i, void *data)
{
	(void)bpf_get_numa_node_id(); // the attach point
	return 0;
}

SEC("raw_tp")
int drive_helper(void *ctx)
{
	bpf_loop(batch_iters, call_helper, NULL, 0);
	return 0;
}

extern int bpf_modify_return_test_tp(int nonce) __ksym;

static long call_kfunc(__u64 i, void *data)
{
	// Fires the bpf_test_run:bpf_trigger_tp tracepoint; an fmod_ret attach point.
	(void)bpf_modify_return_test_tp(0);
	return 0;
}

SEC("raw_tp")
int drive_kfunc(void *ctx)
{
	bpf_loop(batch_iters, call_kfunc, NULL, 0);
	return 0;
}
