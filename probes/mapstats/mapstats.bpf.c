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

// Bits of map_record.flags and count_record.flags.
#define F_COUNT (1 << 0) // elem_count is the kfunc's sum
// Set in every count_record, never in a map_record: a count_record's
// flags sit where a map_record has its map type, far below 1 << 31, so
// the reader tells the two apart by this bit.
#define F_COMPACT (1u << 31)

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

// The record of a map up to known_max_id (steady state): a map's shape
// and name never change, so only its count is written. Must match the
// layout decoded in mapstats.go (countSize).
struct count_record {
	__u32 id;
	__u32 flags; // F_COMPACT | F_COUNT
	__s64 elem_count;
};

// The highest map id whose record the reader holds: ids are handed out
// in increasing order, so every map up to it was read whole before.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} known_max_id SEC(".maps");

SEC("iter/bpf_map")
int dump_map(struct bpf_iter__bpf_map *ctx)
{
	struct bpf_map *map = ctx->map;
	struct map_record r = {};
	__u32 zero = 0, *known;

	if (!map)
		return 0; // end of iteration
	known = bpf_map_lookup_elem(&known_max_id, &zero);
	if (known && map->id <= *known) {
		struct count_record c = {.id = map->id, .flags = F_COMPACT};

		if (bpf_ksym_exists(bpf_map_sum_elem_count)) {
			c.elem_count = bpf_map_sum_elem_count(map);
			c.flags |= F_COUNT;
		}
		bpf_seq_write(ctx->meta->seq, &c, sizeof(c));
		return 0;
	}
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
