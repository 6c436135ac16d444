//go:build ignore

// The profiler: an fentry/fexit pair attached to another BPF program (the
// target), recording every run's duration into a per-CPU log2 histogram.
// It needs no BPF_ENABLE_STATS: only the target pays, and only the
// trampoline and two clock reads.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define BUCKETS 64

// hist is one CPU's histogram: bucket b counts durations in [2^b, 2^(b+1))
// ns (bucket 0 also holds 0 ns).
//
// start_ns is the entry time of the run in progress on this CPU: BPF
// programs run with migration disabled, and the kernel's recursion guard
// keeps a second run of a traced program off the CPU while one is in it.
// Keeping it in the same per-CPU value costs each program one lookup.
struct hist {
	__u64 buckets[BUCKETS];
	__u64 count;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 start_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} hist SEC(".maps");

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

// The attach target is set by the loader (ProgramSpec.AttachTarget and
// AttachTo): "target" here is a placeholder name.
SEC("fentry/target")
int BPF_PROG(prof_entry)
{
	__u32 k = 0;
	struct hist *h = bpf_map_lookup_elem(&hist, &k);

	if (h)
		h->start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("fexit/target")
int BPF_PROG(prof_exit)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 k = 0;
	struct hist *h = bpf_map_lookup_elem(&hist, &k);
	__u64 d;
	__u32 b;

	if (!h || !h->start_ns)
		return 0; // attached mid-run: no entry time
	d = now - h->start_ns;
	h->start_ns = 0;
	b = log2_u64(d);
	if (b >= BUCKETS)
		b = BUCKETS - 1;
	h->buckets[b]++;
	h->count++;
	h->sum_ns += d;
	if (d > h->max_ns)
		h->max_ns = d;
	return 0;
}

// The test target: a socket filter whose run time is controlled by the
// number of bpf_loop iterations (loops), run by BPF_PROG_TEST_RUN.
__u32 loops;
__u64 sink;

static long spin(__u64 i, void *ctx)
{
	sink += i;
	return 0;
}

SEC("socket")
int timed_target(struct __sk_buff *skb)
{
	bpf_loop(loops, spin, NULL, 0);
	return 0;
}
