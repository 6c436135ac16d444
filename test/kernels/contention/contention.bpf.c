//go:build ignore

// Programs for the contention scenarios. Both only act for the test
// process, and only the thread the test arms (block_tid, spin_tid) stays
// inside the program; every other trigger returns at once.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

volatile const __u32 target_tgid;

static __always_inline int from_target(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

static __always_inline __u32 current_tid(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

// The syscall symbols carry the arch's wrapper prefix.
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_GETPGID "__x64_sys_getpgid"
#define SYSCALL_GETSID "__x64_sys_getsid"
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_GETPGID "__arm64_sys_getpgid"
#define SYSCALL_GETSID "__arm64_sys_getsid"
#else
#error "unsupported target arch"
#endif

// Blocked scenario: thread block_tid copies 8 bytes from uaddr, a page the
// test registered with userfaultfd, so the copy sleeps in the fault handler
// until the test fills the page. The trampoline took the program's per-CPU
// recursion guard before the program started and gives it back only when
// the program returns.
__u32 block_tid;
__u64 uaddr;
__u64 copied;
__s64 copy_err;
__u64 block_runs;

SEC("fentry.s/" SYSCALL_GETPGID)
int BPF_PROG(block_getpgid)
{
	__u64 v = 0;

	if (!from_target())
		return 0;
	__sync_fetch_and_add(&block_runs, 1);
	if (block_tid == 0 || current_tid() != block_tid)
		return 0;
	copy_err = bpf_copy_from_user(&v, sizeof(v), (void *)uaddr);
	copied = v;
	return 0;
}

// Preempted scenario: thread spin_tid busy-waits inside a plain fentry
// program until the test sets release or spin_ns pass. Where the kernel
// runs trampoline programs preemptible (migration disabled only), a
// higher-priority thread woken on the same CPU runs while this one still
// holds the guard.
__u32 spin_tid;
__u32 release;
__u32 inside;
__u32 outcome; // 1: released by the test, 2: ran out of time
__u64 spin_ns;
__u64 spin_runs;
// every run, the target's or not: the kernel's run_cnt counts the runs of
// any task (tp_btf/task_rename also fires when the kernel names a new
// kernel thread, such as a kworker spawned during the test).
__u64 all_runs;

struct spin_ctx {
	__u64 deadline;
};

static long spin_step(__u64 i, void *data)
{
	struct spin_ctx *c = data;

	if (release || bpf_ktime_get_ns() > c->deadline)
		return 1;
	return 0;
}

// spin_outer nests a second loop so the wait is bounded by time, not by
// the iteration limit of one bpf_loop (2^23), which a fast CPU runs in
// well under a second.
static long spin_outer(__u64 i, void *data)
{
	struct spin_ctx *c = data;

	bpf_loop(1 << 20, spin_step, c, 0);
	if (release || bpf_ktime_get_ns() > c->deadline)
		return 1;
	return 0;
}

// spin holds the calling thread inside its program when it is spin_tid,
// until the test sets release or spin_ns pass.
static __always_inline int spin(void)
{
	struct spin_ctx c;

	__sync_fetch_and_add(&all_runs, 1);
	if (!from_target())
		return 0;
	__sync_fetch_and_add(&spin_runs, 1);
	if (spin_tid == 0 || current_tid() != spin_tid)
		return 0;
	c.deadline = bpf_ktime_get_ns() + spin_ns;
	inside = 1;
	bpf_loop(1 << 23, spin_outer, &c, 0);
	outcome = release ? 1 : 2;
	inside = 0;
	return 0;
}

// A trampoline program: it runs with migration disabled, not preemption.
SEC("fentry/" SYSCALL_GETSID)
int BPF_PROG(spin_getsid)
{
	return spin();
}

// A raw tracepoint program on task_rename (prctl PR_SET_NAME), which in the
// VM only the test's threads fire, and the kernel when it names a new
// kernel thread. Whether it can be preempted is what the test measures: on
// PREEMPT_RT it was, and on Debian's 7.2 PREEMPT_DYNAMIC (lazy) kernel it
// was too.
SEC("tp_btf/task_rename")
int BPF_PROG(spin_task_rename, struct task_struct *task, const char *comm)
{
	return spin();
}
