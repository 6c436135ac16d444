//go:build ignore

// A BPF_PROG_TYPE_SYSCALL program, run by BPF_PROG_TEST_RUN (one syscall),
// that sums the run-time statistics of the programs whose prog->stats
// addresses the caller wrote into the slots of an mmapped array: the
// steady-state read of a scan that knows, from probes/bpfevents, that no
// program was loaded or unloaded since it last walked them all.
//
// Each program's per-CPU struct bpf_prog_stats is summed over every
// possible CPU exactly as probes/progstats' iterator (and the kernel's
// bpf_prog_get_stats()) does; each CPU's per-CPU offset is learned from a
// one-element PERCPU_ARRAY (its element's address on CPU c minus its
// __percpu base), see progstats.bpf.c. Two variants of the sum: plain loads
// through bpf_rdonly_cast() (a kfunc, 6.2+) and bpf_probe_read_kernel()
// where the kernel has no such kfunc.
//
// The kernel turns off, for good, the perf events of a CPU taken offline,
// so the load/unload watcher (probes/bpfevents) goes blind on that CPU
// once it is back. A raw tracepoint program on cpuhp_enter (every CPU
// hotplug state callback, both ways) counts hotplug steps into an mmapped
// counter: a caller that sees it move stops trusting the watcher. (The
// syscall program cannot check the events' state itself: syscall programs
// must be sleepable, and a sleepable program may not use a
// PERF_EVENT_ARRAY.)
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "prog_stats_sum.h"

char LICENSE[] SEC("license") = "GPL";

// Bits of slot.flags, written by the program.
#define F_SUMMED (1 << 0) // cnt, nsecs (and misses where F_MISSES) are whole sums
#define F_MISSES (1 << 1) // the kernel has bpf_prog_stats.misses

// One slot per program: Go writes stats, the program the rest. Must match
// statstable.go (slotSize and offsets).
struct slot {
	__u64 stats; // prog->stats, the raw __percpu address
	__u64 cnt;
	__u64 nsecs;
	__u64 misses;
	__u32 cpus; // CPUs summed
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); // set at load
	__type(key, __u32);
	__type(value, struct slot);
} slots SEC(".maps");

// The run's arguments and results, BPF_PROG_TEST_RUN's ctx (copied back).
// Must match statstable.go.
struct args {
	__u32 n;   // slots to sum
	__u32 bad; // out: slots whose sum could not be read
};

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

struct loop_ctx {
	struct cpu_offs *o;
	__u32 bad;
};

// sum_probe sums slot i with bpf_probe_read_kernel.
static long sum_probe(__u64 i, struct loop_ctx *c)
{
	__u32 key = i;
	struct slot *s = bpf_map_lookup_elem(&slots, &key);
	int have_misses = bpf_core_field_exists(struct bpf_prog_stats___m, misses);
	__u64 sum[3] = {};
	__u32 cpus = 0;
	int bad = 1;

	if (!s)
		return 1;
	if (s->stats)
		bad = sum_prog_stats(s->stats, c->o, sum, &cpus);
	s->cnt = sum[0];
	s->nsecs = sum[1];
	s->misses = sum[2];
	s->cpus = cpus;
	s->flags = 0;
	if (bad) {
		c->bad++;
		return 0;
	}
	s->flags = F_SUMMED | (have_misses ? F_MISSES : 0);
	return 0;
}

// sum_cast sums slot i with plain loads through bpf_rdonly_cast (the
// verifier turns them into exception-handled loads: a fault reads 0; the
// caller's second drain of the watcher catches the only way to fault,
// a program freed under the read).
static long sum_cast(__u64 i, struct loop_ctx *c)
{
	__u32 key = i, n = nr_cpus;
	struct slot *s = bpf_map_lookup_elem(&slots, &key);
	int have_misses = bpf_core_field_exists(struct bpf_prog_stats___m, misses);
	__u64 cnt = 0, nsecs = 0, misses = 0, stats;
	struct cpu_offs *o = c->o;
	__u32 cpus = 0;

	if (!s)
		return 1;
	stats = s->stats;
	if (!stats) {
		s->flags = 0;
		c->bad++;
		return 0;
	}
	for (__u32 cpu = 0; cpu < MAX_CPUS; cpu++) {
		struct bpf_prog_stats *ps;

		if (cpu >= n)
			break;
		ps = bpf_rdonly_cast((void *)(stats + o->off[cpu & (MAX_CPUS - 1)]),
				     bpf_core_type_id_kernel(struct bpf_prog_stats));
		cnt += ps->cnt.v.a.a.counter;
		nsecs += ps->nsecs.v.a.a.counter;
		if (have_misses)
			misses += ((struct bpf_prog_stats___m *)ps)->misses.v.a.a.counter;
		cpus++;
	}
	s->cnt = cnt;
	s->nsecs = nsecs;
	s->misses = misses;
	s->cpus = cpus;
	s->flags = F_SUMMED | (have_misses ? F_MISSES : 0);
	return 0;
}

static __always_inline int run(struct args *a, void *fn)
{
	__u32 zero = 0;
	struct loop_ctx c = {};

	c.o = bpf_map_lookup_elem(&offs, &zero);
	if (!c.o || learn_cpu_offsets(c.o, 0))
		return -1;
	bpf_loop(a->n, fn, &c, 0);
	a->bad = c.bad;
	return 0;
}

SEC("syscall")
int sum_stats_probe(struct args *a)
{
	return run(a, sum_probe);
}

SEC("syscall")
int sum_stats_cast(struct args *a)
{
	return run(a, sum_cast);
}

// CPU hotplug steps counted by count_hotplug; mmapped by the loader.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hotplug SEC(".maps");

SEC("raw_tp/cpuhp_enter")
int count_hotplug(void *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&hotplug, &zero);

	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
