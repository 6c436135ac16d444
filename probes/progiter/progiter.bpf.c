//go:build ignore

// An iter/bpf_prog program: one read of the iterator walks every BPF program
// in the kernel and emits one fixed-size record per program with what
// bpf_prog_info does not say: the expected attach type, whether the program
// is sleepable (fentry.s vs fentry, lsm.s vs lsm) and the name of the kernel
// function or tracepoint it was verified against.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "prog_facts.h"

char LICENSE[] SEC("license") = "GPL";

#define ATTACH_FUNC_LEN 64

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

SEC("iter/bpf_prog")
int dump_prog(struct bpf_iter__bpf_prog *ctx)
{
	struct bpf_prog *prog = ctx->prog;
	struct prog_record r = {};
	struct bpf_prog_aux *aux;

	if (!prog)
		return 0; // end of iteration
	aux = prog->aux;

	r.id = aux->id;
	r.type = prog->type;
	r.expected_attach_type = prog->expected_attach_type;
	r.attach_btf_id = aux->attach_btf_id;

	READ_PROG_FACTS(r, prog, aux);

	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
