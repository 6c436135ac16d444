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

// Only the canary's own trigger provokes misses: the trigger raises this
// CPU's flag around its bpf_trace_printk (BPF_PROG_TEST_RUN keeps it on one
// CPU), so another process's bpf_trace_printk calls (another canary, a
// debugging tool) never add misses here; they only add runs. No pid is
// involved, so the canary works the same in any pid namespace (a pod).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} armed SEC(".maps");

// Runs while armed: one per trigger.
__u64 target_runs;

SEC("tp_btf/bpf_trace_printk")
int BPF_PROG(canary)
{
	__u32 zero = 0, *on = bpf_map_lookup_elem(&armed, &zero);

	if (!on || !*on)
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
	__u32 zero = 0, *on = bpf_map_lookup_elem(&armed, &zero);

	if (!on)
		return 0;
	*on = 1;
	bpf_printk("bpfleet canary: trigger");
	*on = 0;
	return 0;
}
