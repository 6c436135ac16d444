//go:build ignore

// Minimal iterator programs: they exist only to ask the kernel whether it
// loads, attaches and runs iter/bpf_prog and iter/task_file programs, which
// the agent's discovery and owner attribution can use.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// Elements visited, so a test can see the iterator really ran.
__u64 seen;

SEC("iter/bpf_prog")
int iter_bpf_prog(struct bpf_iter__bpf_prog *ctx)
{
	if (ctx->prog)
		__sync_fetch_and_add(&seen, 1);
	return 0;
}

SEC("iter/task_file")
int iter_task_file(struct bpf_iter__task_file *ctx)
{
	if (ctx->file)
		__sync_fetch_and_add(&seen, 1);
	return 0;
}
