// Summing a program's per-CPU struct bpf_prog_stats (prog->stats, a
// __percpu pointer) over every possible CPU, as bpf_prog_get_stats() does,
// shared by probes/progstats (the iterator) and probes/statstable (the
// steady read). Include once, after vmlinux.h and the libbpf headers.
//
// Kernels built without percpu BTF type tags (gcc builds, the usual case)
// refuse bpf_per_cpu_ptr() on prog->stats, so each CPU's per-CPU offset is
// learned from a map the including program owns: a one-element
// PERCPU_ARRAY whose element address on CPU c (bpf_map_lookup_percpu_elem,
// Linux 5.19) minus the array's __percpu base (pptrs[0]) is CPU c's
// per-CPU offset.
#ifndef __PROG_STATS_SUM_H
#define __PROG_STATS_SUM_H

#define MAX_CPUS 4096

// Number of possible CPUs (the highest possible CPU + 1), set by the
// loader from /sys/devices/system/cpu/possible. The verifier sees the
// frozen value, so the per-CPU loops are bounded by it.
const volatile __u32 nr_cpus = 1;

// A PERCPU_ARRAY of one element: its element's address on each CPU gives
// that CPU's per-CPU offset.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} pcpu SEC(".maps");

// Each CPU's per-CPU offset, learned once (fixed since boot).
struct cpu_offs {
	__u64 learned;
	__u64 off[MAX_CPUS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_offs);
} offs SEC(".maps");

// bpf_array's per-CPU bases: CO-RE finds pptrs through the anonymous
// union it sits in, whichever way the kernel declares it.
struct bpf_array___pp {
	void *pptrs[1];
} __attribute__((preserve_access_index));

// bpf_prog_stats.misses appeared in 5.12.
struct bpf_prog_stats___m {
	u64_stats_t misses;
} __attribute__((preserve_access_index));

// as_scalar turns a pointer the verifier tracks (map, map value) into a
// plain number: it refuses arithmetic on those, but not on a value copied
// out of a stack slot by a probe read.
static __always_inline __u64 as_scalar(void *p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p);
	return v;
}

// read_u64 reads a kernel word; a failed read sets *bad, so that a sum
// with a hole in it is never reported.
static __always_inline __u64 read_u64(__u64 addr, int *bad)
{
	__u64 v = 0;

	if (bpf_probe_read_kernel(&v, sizeof(v), (void *)addr))
		*bad = 1;
	return v;
}

// learn_cpu_offsets fills o->off with each CPU's per-CPU offset, once
// (plus the pcpu map's address where plus_map says so: see progstats.bpf.c);
// it returns non-zero when an offset cannot be learned (fewer CPUs than
// nr_cpus, a failed read), and then no sum may be reported.
static __always_inline int learn_cpu_offsets(struct cpu_offs *o, int plus_map)
{
	__u32 zero = 0, n = nr_cpus;
	int bad = 0;
	__u64 base, add = 0;

	if (o->learned)
		return 0;
	if (n > MAX_CPUS)
		return -1;
	if (plus_map)
		add = as_scalar(&pcpu);
	base = read_u64(as_scalar(&pcpu) + bpf_core_field_offset(struct bpf_array___pp, pptrs), &bad);
	if (bad || !base)
		return -1;
	for (__u32 cpu = 0; cpu < MAX_CPUS; cpu++) {
		void *elem;

		if (cpu >= n)
			break;
		elem = bpf_map_lookup_percpu_elem(&pcpu, &zero, cpu);
		if (!elem)
			return -1;
		o->off[cpu & (MAX_CPUS - 1)] = as_scalar(elem) - base + add;
	}
	o->learned = 1;
	return 0;
}

// sum_prog_stats adds up, with probe reads, the bpf_prog_stats at
// stats + o->off[cpu] for every possible CPU into sum (cnt, nsecs, misses)
// and *cpus; it returns non-zero when a read failed (no sum to report).
static __always_inline int sum_prog_stats(__u64 stats, struct cpu_offs *o, __u64 sum[3], __u32 *cpus)
{
	int have_misses = bpf_core_field_exists(struct bpf_prog_stats___m, misses);
	__u64 cnt_off = bpf_core_field_offset(struct bpf_prog_stats, cnt);
	__u64 nsecs_off = bpf_core_field_offset(struct bpf_prog_stats, nsecs);
	__u64 misses_off = 0;
	__u32 n = nr_cpus;
	int bad = 0;

	if (have_misses)
		misses_off = bpf_core_field_offset(struct bpf_prog_stats___m, misses);
	for (__u32 cpu = 0; cpu < MAX_CPUS && !bad; cpu++) {
		__u64 st, v[3] = {};

		if (cpu >= n)
			break;
		st = stats + o->off[cpu & (MAX_CPUS - 1)];
		// u64_stats_t is one 64-bit counter on 64-bit kernels (the sync
		// part is empty there). Where cnt, nsecs and misses are adjacent,
		// as in every kernel so far, one read takes all three.
		if (have_misses && nsecs_off == cnt_off + 8 && misses_off == cnt_off + 16) {
			if (bpf_probe_read_kernel(v, 24, (void *)(st + cnt_off)))
				bad = 1;
		} else {
			v[0] = read_u64(st + cnt_off, &bad);
			v[1] = read_u64(st + nsecs_off, &bad);
			if (have_misses)
				v[2] = read_u64(st + misses_off, &bad);
		}
		sum[0] += v[0];
		sum[1] += v[1];
		sum[2] += v[2];
		(*cpus)++;
	}
	return bad;
}

#endif /* __PROG_STATS_SUM_H */
