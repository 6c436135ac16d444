// Package mapstats reads every BPF map on the node: identity, shape,
// the kernel's memory figure for it and, for the hash family, how many
// elements it holds. It owns the iter/bpf_map iterator (mapstats.bpf.c)
// and the syscall walk used where the iterator cannot load.
//
// Kernel facts it relies on (ARCHITECTURE.md, "Maps"):
//
//   - iter/bpf_map (Linux 5.8) visits every map in id order without an fd.
//   - The kfunc bpf_map_sum_elem_count() (6.6) sums the per-CPU element
//     counter that only the hash family keeps (HASH, PERCPU_HASH,
//     LRU_HASH, LRU_PERCPU_HASH, HASH_OF_MAPS); for every other type it
//     is 0, so entries are reported for the hash family only. Kernels
//     without it (6.1) load the same object: the call is behind
//     bpf_ksym_exists() and the record says the count is absent.
//   - The kernel's memory figure for a map is map->ops->map_mem_usage()
//     (accurate from 6.4; an estimate from max_entries before), printed
//     only as fdinfo "memlock:"; bpf_map_info has no memory field, so it
//     needs an fd (BPF_MAP_GET_FD_BY_ID) and a read of our own fdinfo.
//   - That figure is fixed for the map's life for most types (arrays,
//     preallocated hashes, ring buffers...) and grows with the element
//     count for hashes made with BPF_F_NO_PREALLOC, LPM tries, dev maps
//     and sock hashes: memoryRule says which, and the Reader reads fdinfo
//     again only for those (TestMemoryRule checks the rule on the kernel).
package mapstats

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Record is what the iterator reports about one BPF map.
type Record struct {
	ID uint32
	// Whole is false for a map up to SetKnownMaxID's id: the record then
	// has only ID and the count.
	Whole      bool
	Type       ebpf.MapType
	KeySize    uint32
	ValueSize  uint32
	MaxEntries uint32
	Flags      uint32 // map_flags as given at creation
	Name       string
	// CountKnown says Count is bpf_map_sum_elem_count()'s (false on a
	// kernel without the kfunc).
	CountKnown bool
	Count      int64
}

// Layout of struct map_record and struct count_record in mapstats.bpf.c.
const (
	recordSize  = 56
	countSize   = 16
	flagCount   = 1 << 0
	flagCompact = 1 << 31 // at offset 4: a count_record's flags, a map_record's type
)

// The kernel hands out a few pages of the seq_file per read(); 64 KiB
// takes a whole chunk even with 64 KiB pages.
const bufSize = 64 << 10

// kfuncSum is the kfunc the iterator calls where the kernel has it.
const kfuncSum = "bpf_map_sum_elem_count"

// Iter is a loaded and attached iter/bpf_map program. It is not safe for
// concurrent use.
type Iter struct {
	prog   *ebpf.Program
	maps   map[string]*ebpf.Map
	known  coreload.KnownMaxID
	link   *link.Iter
	hasSum bool // the kernel has bpf_map_sum_elem_count
	buf    []byte
	names  records.Strings
}

// LoadCached loads the iterator and attaches it with its CO-RE result
// cached in dir ("" for none; the agent's Reader is given the directory
// internal/config chose). When the kernel refuses it the error wraps
// ebpf.ErrNotSupported and says why.
func LoadCached(dir string) (*Iter, coreload.LoadInfo, error) {
	spec, err := loadMapstats()
	if err != nil {
		return nil, coreload.LoadInfo{}, fmt.Errorf("reading bpf_map iterator spec: %w", err)
	}
	p := &coreload.Program{Name: "mapstats", Object: _MapstatsBytes, Insns: spec.Programs["dump_map"].Instructions,
		Target: "bpf_map", Kfuncs: []string{kfuncSum}}
	return coreload.Load(p, dir, func(c *coreload.Result) (*Iter, error) { return load(spec, c) })
}

// load loads the patched program and attaches it.
func load(spec *ebpf.CollectionSpec, c *coreload.Result) (*Iter, error) {
	prog, maps, err := coreload.Instantiate(spec, "dump_map", c, nil)
	if err != nil {
		return nil, err
	}
	it := &Iter{prog: prog, maps: maps, known: coreload.NewKnownMaxID(maps, "map"), hasSum: c.Kfuncs[kfuncSum] != 0, buf: make([]byte, bufSize), names: records.NewStrings()}
	if it.link, _, err = coreload.Attach(prog, "bpf_map"); err != nil {
		it.Close()
		return nil, err
	}
	return it, nil
}

// HasCount says the kernel has bpf_map_sum_elem_count (Linux 6.6), so
// hash-family records carry their element count.
func (it *Iter) HasCount() bool { return it.hasSum }

// SetKnownMaxID tells the iterator that the caller holds the shape and
// name of every map up to id: later reads give only ID and the count for
// those (Whole false), and the whole record for newer ids. Map ids only
// grow, so a map up to id that the caller does not hold was skipped in
// its last read; the caller reads it by syscall. 0 asks for whole records.
func (it *Iter) SetKnownMaxID(id uint32) error { return it.known.Set(id) }

// Read runs one pass of the iterator and returns dst[:0] with one Record
// per map appended, in ascending id order (the kernel walks its map idr
// in order).
func (it *Iter) Read(dst []Record) ([]Record, error) {
	dst = dst[:0]
	rd, err := it.link.Open()
	if err != nil {
		return dst, fmt.Errorf("opening bpf_map iterator: %w", err)
	}
	defer rd.Close()
	err = records.ReadSized(rd, it.buf, 8, recordLen, func(b []byte) {
		dst = append(dst, Record{})
		decode(b, &dst[len(dst)-1], it.names)
	})
	if err != nil {
		return dst[:0], fmt.Errorf("reading bpf_map iterator: %w", err)
	}
	return dst, nil
}

// recordLen is the size of the record b starts.
func recordLen(b []byte) int {
	if binary.LittleEndian.Uint32(b[4:])&flagCompact != 0 {
		return countSize
	}
	return recordSize
}

func decode(b []byte, r *Record, names records.Strings) {
	le := binary.LittleEndian // both targets (amd64, arm64) are little-endian
	if len(b) == countSize {
		*r = Record{ID: le.Uint32(b[0:]), CountKnown: le.Uint32(b[4:])&flagCount != 0, Count: int64(le.Uint64(b[8:]))}
		return
	}
	*r = Record{
		Whole:      true,
		ID:         le.Uint32(b[0:]),
		Type:       ebpf.MapType(le.Uint32(b[4:])),
		KeySize:    le.Uint32(b[8:]),
		ValueSize:  le.Uint32(b[12:]),
		MaxEntries: le.Uint32(b[16:]),
		Flags:      le.Uint32(b[20:]),
		CountKnown: le.Uint32(b[24:])&flagCount != 0,
		Count:      int64(le.Uint64(b[32:])),
		Name:       names.Get(b[40:56]),
	}
}

// Close detaches and unloads the iterator.
func (it *Iter) Close() error {
	return coreload.Close(it.link, it.prog, it.maps)
}
