package mapstats

import "github.com/cilium/ebpf"

// memRule says when a map's fdinfo memlock can change after its creation.
type memRule uint8

const (
	// memFixed: map_mem_usage() depends only on the map's shape
	// (arrays, preallocated hashes, ring buffers, ...): read once per id.
	memFixed memRule = iota
	// memByCount: it grows with the element count the kernel keeps
	// (hashes made with BPF_F_NO_PREALLOC): read again when the count
	// changed, every time where the count is not known.
	memByCount
	// memAlways: it changes with elements the kernel counts nowhere a
	// reader sees (LPM trie nodes, dev map entries, sock hash elements),
	// or the type is not one this rule knows: read on every Read.
	memAlways
)

// bpfFNoPrealloc is BPF_F_NO_PREALLOC.
const bpfFNoPrealloc = 1 << 0

// memoryRule is the memRule of a map of type t made with flags, from
// each type's map_mem_usage() (kernel/bpf/*.c, Linux 6.4 to 6.18).
// Before 6.4 the kernel's figure is an estimate from max_entries, fixed
// for every type, so the rule reads no less than needed there either.
func memoryRule(t ebpf.MapType, flags uint32) memRule {
	switch t {
	case ebpf.Hash, ebpf.PerCPUHash, ebpf.HashOfMaps:
		// htab_map_mem_usage(): preallocated elements are counted at
		// creation; without prealloc, count * element size.
		if flags&bpfFNoPrealloc != 0 {
			return memByCount
		}
		return memFixed
	case ebpf.LRUHash, ebpf.LRUCPUHash: // always preallocated
		return memFixed
	case ebpf.Array, ebpf.PerCPUArray, ebpf.ProgramArray, ebpf.PerfEventArray, ebpf.CGroupArray,
		ebpf.ArrayOfMaps, ebpf.RingBuf, ebpf.UserRingbuf, ebpf.StackTrace, ebpf.Queue, ebpf.Stack,
		ebpf.BloomFilter, ebpf.CPUMap, ebpf.XSKMap, ebpf.SockMap, ebpf.ReusePortSockArray,
		ebpf.StructOpsMap, ebpf.CGroupStorage, ebpf.PerCPUCGroupStorage, ebpf.SkStorage,
		ebpf.InodeStorage, ebpf.TaskStorage, ebpf.CgroupStorage, ebpf.Arena:
		// Sized at creation; the local storages count their buckets,
		// not their elements; an arena reports 0.
		return memFixed
	}
	// LPMTrie (n_entries * node size), DevMap and DevMapHash (items),
	// SockHash (count * element size), and types newer than this list.
	return memAlways
}

// needRefresh says whether a map's memory, last read when its count was
// was, is to be read again now that the count is now (countKnown false:
// the kernel gave none).
func needRefresh(rule memRule, countKnown bool, was, now int64) bool {
	switch rule {
	case memFixed:
		return false
	case memByCount:
		return !countKnown || was != now
	}
	return true
}
