//go:build ignore

// The recursion canary: a tp_btf program on the bpf_trace_printk tracepoint
// that itself calls bpf_trace_printk. The inner call fires the tracepoint
// again on the same CPU while the program is still running, so the kernel's
// per-program recursion guard skips the nested run and adds one to the
// program's recursion_misses. Every triggered run is therefore exactly one
// genuine recursion miss, which makes the program a known-answer source for
// bpfleet's miss accounting.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

// Only the process that loaded the canary provokes misses, so another
// process's bpf_trace_printk calls (another canary, a debugging tool) never
// add misses here; they only add runs.
volatile const __u32 target_tgid;

// Runs in the target process: one per trigger.
__u64 target_runs;

SEC("tp_btf/bpf_trace_printk")
int BPF_PROG(canary)
{
	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	__sync_fetch_and_add(&target_runs, 1);
	bpf_printk("bpfleet canary: nested");
	return 0;
}

// The trigger runs through BPF_PROG_TEST_RUN in the caller's context, so the
// caller decides exactly how many times the canary fires.
SEC("socket")
int trigger(struct __sk_buff *skb)
{
	bpf_printk("bpfleet canary: trigger");
	return 0;
}
