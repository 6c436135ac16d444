//go:build ignore

// An iter/bpf_prog program that reads where one program's JIT code lies:
// the main program's and each subprogram's code address and length, from
// the kernel's own structures (bpf_prog.bpf_func and jited_len, and
// aux->func[] for a program with subprograms), exactly what
// bpf_prog_info's jited_ksyms and jited_func_lens report. Those two read
// as zeros where the kernel hides its addresses (kptr_restrict=2, or no
// CAP_SYSLOG with perf_event_paranoid >= 2); the iterator runs in the
// kernel and is not hidden from. One read emits the record of the program
// whose id is in want[0], nothing for any other.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

// Must match maxRanges and the layout decoded in ranges.go.
#define MAX_RANGES 16

struct jit_range {
	__u64 start;
	__u32 len;
	__u32 _pad;
};

struct range_record {
	__u32 id;
	__u32 func_cnt; // aux->func_cnt: 0 for a program without subprograms
	__u32 nr;       // ranges filled, at most MAX_RANGES
	__u32 _pad;
	struct jit_range r[MAX_RANGES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} want SEC(".maps");

// The record is too big for the 512-byte stack with room to spare: it
// lives in a per-CPU scratch slot.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct range_record);
} scratch SEC(".maps");

SEC("iter/bpf_prog")
int dump_ranges(struct bpf_iter__bpf_prog *ctx)
{
	struct bpf_prog *prog = ctx->prog;
	struct range_record *r;
	struct bpf_prog **funcs;
	__u32 zero = 0, *id, cnt, i;

	if (!prog)
		return 0; // end of iteration
	id = bpf_map_lookup_elem(&want, &zero);
	if (!id || BPF_CORE_READ(prog, aux, id) != *id)
		return 0;
	r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->id = *id;
	// Function pointers and the func array are read with probe reads:
	// the verifier types neither as a struct it can walk.
	cnt = BPF_CORE_READ(prog, aux, func_cnt);
	r->func_cnt = cnt;
	if (cnt == 0) {
		r->r[0].start = (__u64)BPF_CORE_READ(prog, bpf_func);
		r->r[0].len = BPF_CORE_READ(prog, jited_len);
		r->nr = 1;
	} else {
		funcs = BPF_CORE_READ(prog, aux, func);
		for (i = 0; i < MAX_RANGES && i < cnt; i++) {
			struct bpf_prog *sub = NULL;

			if (bpf_probe_read_kernel(&sub, sizeof(sub), &funcs[i]) || !sub)
				break;
			r->r[i].start = (__u64)BPF_CORE_READ(sub, bpf_func);
			r->r[i].len = BPF_CORE_READ(sub, jited_len);
			r->nr = i + 1;
		}
	}
	bpf_seq_write(ctx->meta->seq, r, sizeof(*r));
	return 0;
}
