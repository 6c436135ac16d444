//go:build ignore

// An iter/bpf_map program that writes one fixed-size record per BPF map in
// the kernel: identity, shape (type, key and value size, max entries,
// flags) and, where the kernel has the kfunc bpf_map_sum_elem_count()
// (Linux 6.6), the element count the hash family keeps. No map fd is
// opened.
//
// The kfunc is declared weak: on a kernel without it the loader writes 0
// for its address, bpf_ksym_exists() is then a constant false, and the
// verifier drops the call as dead code, so one object loads on 6.1 and
// 6.6+ alike; F_COUNT says which happened.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

// libbpf before 1.2 (Debian's headers) has no bpf_ksym_exists.
#ifndef bpf_ksym_exists
#define bpf_ksym_exists(sym) (!!(sym))
#endif

extern s64 bpf_map_sum_elem_count(const struct bpf_map *map) __ksym __weak;

// Bits of map_record.flags.
#define F_COUNT (1 << 0) // elem_count is the kfunc's sum

// Must match the layout decoded in mapstats.go (recordSize and offsets).
struct map_record {
	__u32 id;
	__u32 type;
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries;
	__u32 map_flags;
	__u32 flags;
	__u32 _pad;
	__s64 elem_count;
	char name[16];
};

SEC("iter/bpf_map")
int dump_map(struct bpf_iter__bpf_map *ctx)
{
	struct bpf_map *map = ctx->map;
	struct map_record r = {};

	if (!map)
		return 0; // end of iteration
	r.id = map->id;
	r.type = map->map_type;
	r.key_size = map->key_size;
	r.value_size = map->value_size;
	r.max_entries = map->max_entries;
	r.map_flags = map->map_flags;
	bpf_probe_read_kernel(&r.name, sizeof(r.name), &map->name);
	if (bpf_ksym_exists(bpf_map_sum_elem_count)) {
		r.elem_count = bpf_map_sum_elem_count(map);
		r.flags |= F_COUNT;
	}
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
