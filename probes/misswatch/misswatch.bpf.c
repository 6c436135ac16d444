//go:build ignore

// A BPF_PROG_TYPE_SYSCALL program, run once by BPF_PROG_TEST_RUN, that
// tells the miss watcher where each CPU's copy of a program's miss counter
// lives: each possible CPU's per-CPU offset (learned from a one-element
// PERCPU_ARRAY, as probes/progstats does: see prog_stats_sum.h) and the
// offset of `misses` in struct bpf_prog_stats on this kernel (CO-RE).
// CPU c's counter of a program is then prog->stats + off[c] + misses_off.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "prog_stats_sum.h"

char LICENSE[] SEC("license") = "GPL";

// Written by learn, read by Go from the program's .bss: where misses sits
// in bpf_prog_stats, and a kernel address the watcher may probe with a
// watchpoint (this program's own map value, which nothing writes after).
__u64 misses_off = 0;
__u64 probe_addr = 0;

SEC("syscall")
int learn(void *ctx)
{
	__u32 zero = 0;
	struct cpu_offs *o = bpf_map_lookup_elem(&offs, &zero);

	if (!o)
		return 1;
	// bpf_prog_stats.misses appeared in Linux 5.12: nothing to watch
	// before it.
	if (!bpf_core_field_exists(struct bpf_prog_stats___m, misses))
		return 2;
	misses_off = bpf_core_field_offset(struct bpf_prog_stats___m, misses);
	if (learn_cpu_offsets(o, 0))
		return 3;
	probe_addr = as_scalar(o);
	return 0;
}
