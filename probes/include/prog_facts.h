// What bpf_prog_info does not say about a program, read the same way by
// both bpf_prog iterators (probes/progiter, probes/progstats): whether it is
// sleepable, the BTF object of its target, the program it targets while
// loaded but unattached, and the name of the function or tracepoint it was
// verified against. Include after vmlinux.h and bpf_core_read.h.
#ifndef BPFLEET_PROG_FACTS_H
#define BPFLEET_PROG_FACTS_H

// Flag bits both iterators' records share (decoded in their Go loaders).
#define F_SLEEPABLE (1 << 0)
#define F_SLEEPABLE_KNOWN (1 << 1)
#define F_ATTACH_FUNC (1 << 2)
#define F_ATTACH_BTF_OBJ_KNOWN (1 << 3)
#define F_DST_PROG_KNOWN (1 << 4)

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

// READ_PROG_FACTS fills r's flags, attach_btf_obj_id, dst_prog_id and
// attach_func (a char array) from prog and its aux. A macro, not a
// function: the two records are different structs with these fields.
//
// dst_prog is set while a program that targets another BPF program is
// loaded but not yet attached (the kernel drops it on attach). A char
// pointer is a scalar to the verifier: attach_func_name is copied out with
// a probe read, NULL for programs without a BTF target.
#define READ_PROG_FACTS(r, prog, aux)                                                              \
	do {                                                                                       \
		const char *__name;                                                                \
		if (bpf_core_field_exists((prog)->sleepable)) {                                    \
			if (BPF_CORE_READ_BITFIELD(prog, sleepable))                               \
				(r).flags |= F_SLEEPABLE;                                          \
			(r).flags |= F_SLEEPABLE_KNOWN;                                            \
		} else if (bpf_core_field_exists(struct bpf_prog_aux___old, sleepable)) {          \
			if (((struct bpf_prog_aux___old *)(aux))->sleepable)                        \
				(r).flags |= F_SLEEPABLE;                                          \
			(r).flags |= F_SLEEPABLE_KNOWN;                                            \
		}                                                                                  \
		if (bpf_core_field_exists(struct bpf_prog_aux___btf, attach_btf)) {                \
			struct btf *__btf = ((struct bpf_prog_aux___btf *)(aux))->attach_btf;       \
			if (__btf)                                                                 \
				(r).attach_btf_obj_id = __btf->id;                                 \
			(r).flags |= F_ATTACH_BTF_OBJ_KNOWN;                                       \
		}                                                                                  \
		if (bpf_core_field_exists(struct bpf_prog_aux___dst, dst_prog)) {                  \
			struct bpf_prog *__dst = ((struct bpf_prog_aux___dst *)(aux))->dst_prog;    \
			if (__dst)                                                                 \
				(r).dst_prog_id = __dst->aux->id;                                  \
			(r).flags |= F_DST_PROG_KNOWN;                                             \
		}                                                                                  \
		__name = (aux)->attach_func_name;                                                  \
		if (__name && bpf_probe_read_kernel_str((r).attach_func, sizeof((r).attach_func),  \
							__name) > 0)                               \
			(r).flags |= F_ATTACH_FUNC;                                                \
	} while (0)

#endif
