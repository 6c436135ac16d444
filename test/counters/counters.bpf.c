//go:build ignore

// Counting programs of three attach types on one tracepoint that only a
// BPF_PROG_TEST_RUN of a socket filter fires (bpf_test_run:bpf_test_finish),
// so a test that owns the trigger knows exactly how many runs each program
// must have.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

volatile const __u32 target_tgid;

__u64 hits_raw_tp;
__u64 hits_tp_btf;
__u64 hits_tracepoint;

static __always_inline int mine(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

SEC("raw_tp/bpf_test_finish")
int count_raw_tp(void *ctx)
{
	if (mine())
		__sync_fetch_and_add(&hits_raw_tp, 1);
	return 0;
}

SEC("tp_btf/bpf_test_finish")
int BPF_PROG(count_tp_btf)
{
	if (mine())
		__sync_fetch_and_add(&hits_tp_btf, 1);
	return 0;
}

SEC("tracepoint/bpf_test_run/bpf_test_finish")
int count_tracepoint(void *ctx)
{
	if (mine())
		__sync_fetch_and_add(&hits_tracepoint, 1);
	return 0;
}

SEC("socket")
int trigger(struct __sk_buff *skb)
{
	return 0;
}
