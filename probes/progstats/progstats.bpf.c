//go:build ignore

// An iter/bpf_prog program that reads, in one pass over every BPF program
// in the kernel, everything `bpfleet list` shows about a program, run-time
// statistics included, so that a scan needs no per-program syscall (no fd
// is ever opened, so no program is ever kept alive by the scan).
//
// The statistics are per-CPU (prog->stats is a __percpu pointer) and are
// summed here over every possible CPU exactly as bpf_prog_get_stats() does.
// Kernels built without percpu BTF type tags (gcc builds, the usual case)
// refuse bpf_per_cpu_ptr() on prog->stats, so the per-CPU offset of each CPU
// is found from a map this program owns: a one-element PERCPU_ARRAY whose
// element address on CPU c (bpf_map_lookup_percpu_elem, Linux 5.19) minus
// the array's __percpu base (pptrs[0]) is CPU c's per-CPU offset.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "prog_facts.h"
#include "prog_stats_sum.h"

char LICENSE[] SEC("license") = "GPL";

#define ATTACH_FUNC_LEN 64
#define MAX_MAP_IDS 16

// Bits of prog_record.flags (bits 0-4 are prog_facts.h's).
#define F_STATS (1 << 5)        // run_cnt and run_time_ns summed over every possible CPU
#define F_MISSES (1 << 6)       // the kernel has bpf_prog_stats.misses
#define F_STATIC (1 << 7)       // uid, map ids, jited length, memlock pages all read
#define F_VERIFIED_INSNS (1 << 8)
// Set in every stat_record, never in a prog_record: a stat_record's flags
// sit where a prog_record has the low half of its program type, which is
// far below 1 << 15, so the reader tells the two apart by this bit.
#define F_COMPACT (1 << 15)

// Must match the layout decoded in progstats.go (recordSize and offsets).
struct prog_record {
	__u32 id;
	__u32 type;
	__u32 expected_attach_type;
	__u32 attach_btf_id;
	__u32 attach_btf_obj_id;
	__u32 dst_prog_id;
	__u32 flags;
	__u32 nr_map_ids;
	__u8 tag[8];
	char name[16];
	__u64 load_time;
	__u64 run_cnt;
	__u64 run_time_ns;
	__u64 misses;
	__u32 jited_len;
	__u32 xlated_len;
	__u32 uid;
	__u32 btf_id;
	__u32 verified_insns;
	__u32 pages;
	__u32 map_ids[MAX_MAP_IDS];
	char attach_func[ATTACH_FUNC_LEN];
	__u32 cpus;
	__u32 _pad;
	__u64 stats; // prog->stats, the raw __percpu address (probes/statstable)
};

// The record of a program up to known_max_id (steady state): only what
// changes. Must match the layout decoded in progstats.go (statSize).
struct stat_record {
	__u32 id;
	__u16 flags; // F_COMPACT | F_STATS | F_MISSES
	__u16 cpus;
	__u64 run_cnt;
	__u64 run_time_ns;
	__u64 misses;
	// prog->stats, the raw __percpu address: probes/statstable sums a
	// program's statistics from it without walking every program.
	__u64 stats;
};

// The highest program id whose static fields the reader already holds:
// ids are handed out in increasing order, so every program up to it was
// read whole before, and a steady-state pass writes a stat_record for it.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} known_max_id SEC(".maps");

// Flavours for fields that moved or appeared over kernel versions.
struct bpf_prog_aux___vi {
	u32 verified_insns;
} __attribute__((preserve_access_index));

// dump_whole writes the whole record of a program the reader does not
// hold yet (its first record): identity, static fields, facts, and the
// statistics already summed in s. Inlined: a subprogram would make this
// program's own jited length a sum the record cannot give.
static __always_inline int dump_whole(struct bpf_iter__bpf_prog *ctx, struct bpf_prog *prog,
				      struct bpf_prog_aux *aux, struct stat_record *s)
{
	struct prog_record r = {};

	r.id = s->id;
	r.flags = s->flags;
	r.cpus = s->cpus;
	r.run_cnt = s->run_cnt;
	r.run_time_ns = s->run_time_ns;
	r.misses = s->misses;
	r.stats = s->stats;
	r.type = prog->type;
	r.expected_attach_type = prog->expected_attach_type;
	r.attach_btf_id = aux->attach_btf_id;
	bpf_core_read(&r.tag, sizeof(r.tag), &prog->tag);
	bpf_core_read(&r.name, sizeof(r.name), &aux->name);
	r.load_time = aux->load_time;
	r.xlated_len = prog->len * 8; // bpf_prog_insn_size()
	r.pages = BPF_CORE_READ_BITFIELD_PROBED(prog, pages);
	if (aux->btf)
		r.btf_id = BPF_CORE_READ(aux, btf, id);

	if (bpf_core_field_exists(struct bpf_prog_aux___vi, verified_insns)) {
		r.verified_insns = BPF_CORE_READ((struct bpf_prog_aux___vi *)aux, verified_insns);
		r.flags |= F_VERIFIED_INSNS;
	}

	READ_PROG_FACTS(r, prog, aux);

	// What bpf_prog_get_info_by_fd() and the fdinfo say that needs a walk:
	// map ids, the jited length, the creator's uid. A program with more
	// maps than a record holds, or with subprograms, is marked incomplete
	// and read by syscall instead.
	{
		__u32 nmaps = aux->used_map_cnt, nfuncs = aux->func_cnt;
		struct bpf_map **maps = aux->used_maps;
		int ok = nmaps <= MAX_MAP_IDS && nfuncs == 0;

		r.nr_map_ids = nmaps;
		for (int i = 0; i < MAX_MAP_IDS && ok; i++) {
			struct bpf_map *m = NULL;

			if (i >= nmaps)
				break;
			bpf_probe_read_kernel(&m, sizeof(m), &maps[i]);
			if (!m) {
				ok = 0;
				break;
			}
			r.map_ids[i] = BPF_CORE_READ(m, id);
		}
		// A program with subprograms has the sum of theirs as its jited
		// length: read by syscall (a loop here would cost every load of
		// this program verifier time).
		r.jited_len = prog->jited_len;
		if (bpf_core_field_exists(aux->user) && aux->user) {
			r.uid = BPF_CORE_READ(aux, user, uid.val);
		} else {
			ok = 0;
		}
		if (ok)
			r.flags |= F_STATIC;
	}

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

SEC("iter/bpf_prog")
int dump_prog(struct bpf_iter__bpf_prog *ctx)
{
	struct bpf_prog *prog = ctx->prog;
	struct stat_record s = {};
	struct bpf_prog_aux *aux;
	__u32 zero = 0;

	if (!prog)
		return 0; // end of iteration
	aux = prog->aux;

	s.id = aux->id;
	// Run-time statistics first: the verifier walks the per-CPU loop once
	// per distinct state reaching it, and every branch below (flags, the
	// map and subprogram loops) would multiply those states.
	// Sum prog->stats over every possible CPU.
	{
		__u64 stats = 0, sum[3] = {};
		int have_misses = bpf_core_field_exists(struct bpf_prog_stats___m, misses);
		__u32 cpus = 0;
		int bad;
		struct cpu_offs *o = bpf_map_lookup_elem(&offs, &zero);

		// The first program of the first pass learns each CPU's per-CPU
		// offset, kept as offset + the pcpu map's address: a program's
		// stats pointer minus that address is what the verifier lets us
		// have as a number.
		if (!o || learn_cpu_offsets(o, 1))
			goto stats_done;
		// prog->stats by a direct (CO-RE) load, not a probe read. The
		// verifier refuses adding an unbounded number to that pointer,
		// but a pointer minus a pointer is a number to it (for a
		// loader with CAP_PERFMON): prog->stats - &pcpu, and each
		// learned offset has &pcpu added back.
		if (!prog->stats)
			goto stats_done;
		stats = (__u64)prog->stats;
		s.stats = stats;
		stats -= (__u64)(void *)&pcpu;
		asm volatile("" : "+r"(stats)); // keep the subtraction first
		bad = sum_prog_stats(stats, o, sum, &cpus);
		s.run_cnt = sum[0];
		s.run_time_ns = sum[1];
		s.misses = sum[2];
		s.cpus = cpus;
		if (bad)
			goto stats_done;
		s.flags |= F_STATS;
		if (have_misses)
			s.flags |= F_MISSES;
	}
stats_done:
	{
		__u32 *known = bpf_map_lookup_elem(&known_max_id, &zero);

		// A program the reader holds whole: 32 bytes, nothing zeroed
		// or read beyond the statistics.
		if (known && s.id <= *known) {
			s.flags |= F_COMPACT;
			bpf_seq_write(ctx->meta->seq, &s, sizeof(s));
			return 0;
		}
	}
	return dump_whole(ctx, prog, aux, &s);
}
