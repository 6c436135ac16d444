//go:build ignore

// The profiler: programs attached to another BPF program (the target) that
// record its runs' durations into a per-CPU log2 histogram, with global
// BPF stats off. Only the target pays.
//
// Two shapes, same histogram:
//   - the fentry/fexit pair (the default), entry time in the per-CPU
//     histogram value (migration is disabled and the recursion guard keeps a
//     second run of the target off the CPU while one is in it);
//   - a session (BPF_TRACE_FSESSION, kernels that have it): ONE program,
//     run by the trampoline at entry and at exit, with a per-invocation
//     cookie on the trampoline's stack for the entry time. Measured no
//     cheaper than the pair on 7.2 (it still runs twice).
// Both count every run; the clock is read on 1 run in sample_mask+1
// (sample_mask = 0: every run). With timing_only, prof_count counts and
// the timing programs come and go in windows (the exit hook is the dear
// part of a timed run).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define BUCKETS 64

// hist is one CPU's histogram: bucket b counts timed durations in
// [2^b, 2^(b+1)) ns (bucket 0 also holds 0 ns).
struct hist {
	__u64 buckets[BUCKETS];
	__u64 runs;     // every run entered
	__u64 timed;    // runs whose duration is in buckets
	__u64 sum_ns;   // of the timed runs
	__u64 max_ns;
	__u64 start_ns; // pair only: entry time of the timed run in progress
	__u64 exits;    // session only: exit invocations (tells whether returning 1 at entry skipped them)
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} hist SEC(".maps");

// Time 1 run in sample_mask+1 (a power of two minus one), set at load.
const volatile __u64 sample_mask = 0;
// Set where prof_count counts the runs (the timing programs are attached
// for windows only): then they time every run they see and count none.
const volatile __u8 timing_only = 0;

extern __u64 *bpf_session_cookie(void *ctx) __ksym __weak;
extern bool bpf_session_is_return(void *ctx) __ksym __weak;

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

static __always_inline void record(struct hist *h, __u64 d)
{
	__u32 b = log2_u64(d);

	if (b >= BUCKETS)
		b = BUCKETS - 1;
	h->buckets[b]++;
	h->timed++;
	h->sum_ns += d;
	if (d > h->max_ns)
		h->max_ns = d;
}

// The attach target is set by the loader (ProgramSpec.AttachTarget and
// AttachTo): "target" here is a placeholder name.
SEC("fentry/target")
int BPF_PROG(prof_entry)
{
	__u32 k = 0;
	struct hist *h = bpf_map_lookup_elem(&hist, &k);

	if (!h)
		return 0;
	if (!timing_only && (h->runs++ & sample_mask))
		return 0;
	h->start_ns = bpf_ktime_get_ns();
	return 0;
}

// Counts every run alone: the fentry that stays attached while the timing
// programs come and go (windowed timing).
SEC("fentry/target")
int BPF_PROG(prof_count)
{
	__u32 k = 0;
	struct hist *h = bpf_map_lookup_elem(&hist, &k);

	if (h)
		h->runs++;
	return 0;
}

SEC("fexit/target")
int BPF_PROG(prof_exit)
{
	__u64 now, start;
	__u32 k = 0;
	struct hist *h = bpf_map_lookup_elem(&hist, &k);

	if (!h || !h->start_ns)
		return 0; // not timed, or attached mid-run
	now = bpf_ktime_get_ns();
	start = h->start_ns;
	h->start_ns = 0;
	record(h, now - start);
	return 0;
}

// The session program. Its section says fentry for the ELF reader: the
// loader loads it as BPF_TRACE_FSESSION (cilium/ebpf v0.22 has no name for
// that attach type).
static __always_inline int session(void *ctx, int skip)
{
	__u64 *cookie = bpf_session_cookie(ctx);
	__u32 k = 0;
	struct hist *h;

	if (bpf_session_is_return(ctx)) {
		__u64 start = *cookie;

		h = bpf_map_lookup_elem(&hist, &k);
		if (!h)
			return 0;
		h->exits++;
		if (!start)
			return 0;
		record(h, bpf_ktime_get_ns() - start);
		return 0;
	}
	h = bpf_map_lookup_elem(&hist, &k);
	if (!h)
		return 0;
	if (!timing_only && (h->runs++ & sample_mask)) {
		*cookie = 0;
		return skip; // 1: ask the trampoline not to run us at exit
	}
	*cookie = bpf_ktime_get_ns();
	return 0;
}

SEC("fentry/target")
int BPF_PROG(prof_session)
{
	return session(ctx, 0);
}

// The same, returning 1 at the entry of an untimed run: where the kernel
// skips the exit run then (as kprobe sessions do), sampling saves a whole
// program invocation.
SEC("fentry/target")
int BPF_PROG(prof_session_skip)
{
	return session(ctx, 1);
}

// Floors for the cost test: what attaching costs before the program does
// anything (the trampoline, the recursion guard, the invocation).
SEC("fentry/target")
int BPF_PROG(floor_entry)
{
	return 0;
}

SEC("fexit/target")
int BPF_PROG(floor_exit)
{
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

// What the profiler's clock costs by itself, where no tracing is allowed
// (the CI host): a socket filter reading bpf_ktime_get_ns twice, as a timed
// run does, against one that does not.
SEC("socket")
int clock_twice(struct __sk_buff *skb)
{
	__u64 t0 = bpf_ktime_get_ns();

	sink += bpf_ktime_get_ns() - t0;
	return 0;
}

SEC("socket")
int clock_none(struct __sk_buff *skb)
{
	sink += 1;
	return 0;
}
