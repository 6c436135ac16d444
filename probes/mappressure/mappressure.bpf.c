//go:build ignore

// Map pressure: the entries each LRU hash map evicted, and the updates each
// hash-family map refused, per map id.
//
// The kernel keeps no eviction counter. Every eviction of an LRU hash map
// (LRU_HASH and LRU_PERCPU_HASH, common and per-CPU LRU lists) goes through
// htab_lru_map_delete_node(), the LRU's delete callback, which returns true
// when it removed the element; its first argument is the map's struct
// bpf_htab, whose first member is the struct bpf_map (ARCHITECTURE.md,
// "Maps"). The callback is called through a function pointer, so it is never
// inlined and fexit always sees it.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

// Evictions per map id since the probe was attached. A plain hash with an
// atomic add rather than a per-CPU one: evictions already run under the LRU
// list's lock, and one value per map keeps the read one lookup per map. The
// agent deletes the keys of maps that are gone. Preallocated, as tracing
// programs need on kernels before 6.1. Entries are only made for maps that
// evicted, so the bound is on maps that evict, not on maps.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} evictions SEC(".maps");

// Evictions the probe could not count because evictions was full.
__u64 dropped;

SEC("fexit/htab_lru_map_delete_node")
int BPF_PROG(count_eviction, void *arg, struct bpf_lru_node *node, bool removed)
{
	if (!removed)
		return 0;
	// arg is void * in BTF, a scalar to the verifier: read through it.
	__u32 id = BPF_CORE_READ((struct bpf_map *)arg, id);
	__u64 *n = bpf_map_lookup_elem(&evictions, &id);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(&evictions, &id, &one, BPF_NOEXIST) == 0)
		return 0;
	// Another CPU made the entry first, or the map is full.
	n = bpf_map_lookup_elem(&evictions, &id);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		__sync_fetch_and_add(&dropped, 1);
	return 0;
}

// Updates the hash family refused because the map was full (E2BIG) or
// memory ran out (ENOMEM, an LRU without a free node), per map id. An LPM
// trie, not a hash: count_refusal watches the hash family's update
// functions, and a hash of its own would run it again on its own insert
// (a nested run the kernel turns away from 5.12, and on 5.10 nothing
// guards). Entries are /32 prefixes of the map id: exact matches only.
struct refusal_key {
	__u32 prefixlen;
	__u32 id;
};

struct refusal_counts {
	__u64 full;   // -E2BIG
	__u64 nomem;  // -ENOMEM
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct refusal_key);
	__type(value, struct refusal_counts);
} refusals SEC(".maps");

// Refusals not counted because refusals was full.
__u64 refusals_dropped;

#define E2BIG_ 7
#define ENOMEM_ 12

// The loader attaches one copy to each of htab_map_update_elem,
// htab_lru_map_update_elem, htab_percpu_map_update_elem,
// htab_lru_percpu_map_update_elem (programs' updates and most syscalls) and
// bpf_percpu_hash_update (the per-CPU types' syscall path), which share
// this signature. Only the failure path does more than a compare.
SEC("fexit/htab_map_update_elem")
int BPF_PROG(count_refusal, struct bpf_map *map, void *key, void *value, __u64 flags, int ret)
{
	if (ret != -E2BIG_ && ret != -ENOMEM_)
		return 0;
	struct refusal_key k = { .prefixlen = 32, .id = BPF_CORE_READ(map, id) };
	struct refusal_counts *c = bpf_map_lookup_elem(&refusals, &k);
	if (!c) {
		struct refusal_counts zero = {};
		bpf_map_update_elem(&refusals, &k, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&refusals, &k);
		if (!c) {
			__sync_fetch_and_add(&refusals_dropped, 1);
			return 0;
		}
	}
	if (ret == -E2BIG_)
		__sync_fetch_and_add(&c->full, 1);
	else
		__sync_fetch_and_add(&c->nomem, 1);
	return 0;
}
