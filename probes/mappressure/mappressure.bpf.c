//go:build ignore

// Map pressure: the entries each LRU hash map evicted, per map id.
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
