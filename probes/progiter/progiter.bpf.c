//go:build ignore

// An iter/bpf_prog program: one read of the iterator walks every BPF program
// in the kernel and emits one fixed-size record per program with what
// bpf_prog_info does not say: the expected attach type, whether the program
// is sleepable (fentry.s vs fentry, lsm.s vs lsm) and the name of the kernel
// function or tracepoint it was verified against.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define ATTACH_FUNC_LEN 64

// Bits of prog_record.flags.
#define F_SLEEPABLE (1 << 0)
#define F_SLEEPABLE_KNOWN (1 << 1)
#define F_ATTACH_FUNC (1 << 2)
#define F_ATTACH_BTF_OBJ_KNOWN (1 << 3)
#define F_DST_PROG_KNOWN (1 << 4)

// Must match the layout decoded in progiter.go (recordSize).
struct prog_record {
	__u32 id;
	__u32 type;
	__u32 expected_attach_type;
	__u32 attach_btf_id;
	__u32 attach_btf_obj_id;
	__u32 dst_prog_id;
	__u32 flags;
	__u32 _pad;
	char attach_func[ATTACH_FUNC_LEN];
};

// Before Linux 6.10 the sleepable flag lived in bpf_prog_aux as a bool; it
// then moved into struct bpf_prog as a bitfield. CO-RE picks whichever the
// running kernel has.
struct bpf_prog_aux___old {
	bool sleepable;
} __attribute__((preserve_access_index));

// attach_btf (Linux 5.11) and dst_prog (5.10) are newer than the iterator
// itself (5.9); the flavour structs let the field checks name them without
// assuming vmlinux.h's layout.
struct bpf_prog_aux___btf {
	struct btf *attach_btf;
} __attribute__((preserve_access_index));

struct bpf_prog_aux___dst {
	struct bpf_prog *dst_prog;
} __attribute__((preserve_access_index));

SEC("iter/bpf_prog")
int dump_prog(struct bpf_iter__bpf_prog *ctx)
{
	struct bpf_prog *prog = ctx->prog;
	struct prog_record r = {};
	struct bpf_prog_aux *aux;
	const char *name;

	if (!prog)
		return 0; // end of iteration
	aux = prog->aux;

	r.id = aux->id;
	r.type = prog->type;
	r.expected_attach_type = prog->expected_attach_type;
	r.attach_btf_id = aux->attach_btf_id;

	if (bpf_core_field_exists(prog->sleepable)) {
		if (BPF_CORE_READ_BITFIELD(prog, sleepable))
			r.flags |= F_SLEEPABLE;
		r.flags |= F_SLEEPABLE_KNOWN;
	} else if (bpf_core_field_exists(struct bpf_prog_aux___old, sleepable)) {
		if (((struct bpf_prog_aux___old *)aux)->sleepable)
			r.flags |= F_SLEEPABLE;
		r.flags |= F_SLEEPABLE_KNOWN;
	}

	if (bpf_core_field_exists(struct bpf_prog_aux___btf, attach_btf)) {
		struct btf *btf = ((struct bpf_prog_aux___btf *)aux)->attach_btf;

		if (btf)
			r.attach_btf_obj_id = btf->id;
		r.flags |= F_ATTACH_BTF_OBJ_KNOWN;
	}

	// dst_prog is set while a program that targets another BPF program is
	// loaded but not yet attached (the kernel drops it on attach).
	if (bpf_core_field_exists(struct bpf_prog_aux___dst, dst_prog)) {
		struct bpf_prog *dst = ((struct bpf_prog_aux___dst *)aux)->dst_prog;

		if (dst)
			r.dst_prog_id = dst->aux->id;
		r.flags |= F_DST_PROG_KNOWN;
	}

	// A char pointer is a scalar to the verifier: copy the string out
	// with a probe read. NULL for programs without a BTF target.
	name = aux->attach_func_name;
	if (name && bpf_probe_read_kernel_str(r.attach_func, sizeof(r.attach_func), name) > 0)
		r.flags |= F_ATTACH_FUNC;

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
