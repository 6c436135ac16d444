package mapstats

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/bpfleet/bpfleet/probes/internal/fdinfo"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Map is one BPF map on the node.
type Map struct {
	ID         uint32
	Type       ebpf.MapType
	Name       string
	KeySize    uint32
	ValueSize  uint32
	MaxEntries uint32
	Flags      uint32 // map_flags as given at creation
	// Memory is the kernel's own figure in bytes (fdinfo memlock:);
	// MemoryKnown is false when it could not be read.
	Memory      uint64
	MemoryKnown bool
	Entries     Entries
}

// Entries is a map's element count, known only for the hash family.
type Entries struct {
	Count uint64
	Known bool
	// How says where a known Count came from: CountKfunc or CountWalk.
	How CountMethod
	// Reason says why Count is not known ("" when it is). When a
	// bounded walk stopped at its bound, Count is that bound: the map
	// holds at least that many.
	Reason string
}

// CountMethod is how an element count was found.
type CountMethod uint8

const (
	CountNone  CountMethod = iota
	CountKfunc             // bpf_map_sum_elem_count() in the iterator
	CountWalk              // BPF_MAP_GET_NEXT_KEY over every key (Options.CountBound)
)

// Fullness is Entries.Count / MaxEntries, false when the count is not
// known or the map has no max entries (ring buffers have a size there,
// not a count; arrays report none).
func (m *Map) Fullness() (float64, bool) {
	if !m.Entries.Known || m.MaxEntries == 0 {
		return 0, false
	}
	return float64(m.Entries.Count) / float64(m.MaxEntries), true
}

// HashFamily says the kernel keeps an element count for maps of type t:
// the only types bpf_map_sum_elem_count() sums (0 for every other).
func HashFamily(t ebpf.MapType) bool {
	switch t {
	case ebpf.Hash, ebpf.PerCPUHash, ebpf.LRUHash, ebpf.LRUCPUHash, ebpf.HashOfMaps:
		return true
	}
	return false
}

// Source says how a Read read the maps.
type Source struct {
	// Iterator is true when iter/bpf_map gave the list; false for the
	// syscall walk (GET_NEXT_ID, GET_FD_BY_ID, OBJ_GET_INFO_BY_FD).
	Iterator bool
	// Reason is why the iterator was not used ("" when it was).
	Reason string
}

// Options of a Reader.
type Options struct {
	// CountBound, when above 0, counts the elements of hash-family maps
	// whose count the kernel cannot give (no kfunc, or the syscall walk)
	// by walking their keys, stopping at CountBound keys. Each walk is
	// one syscall per key, so it is opt-in.
	CountBound int
	// NoIterator reads by syscalls only (tests, and callers that know the
	// iterator is refused).
	NoIterator bool
	// CacheDir is the CO-RE cache directory ("" for none).
	CacheDir string
}

// Reasons entries are absent.
const (
	ReasonNotHash = "the kernel counts elements only for the hash family"
	ReasonNoKfunc = "kernel has no bpf_map_sum_elem_count kfunc (Linux 6.6)"
)

// Reader reads every map on the node, keeping each map's memory figure
// between reads where it cannot change (memoryRule). Not safe for
// concurrent use.
type Reader struct {
	opts   Options
	it     *Iter // nil: the syscall walk
	source Source
	dir    *fdinfo.Dir
	recs   []Record
	maps   []Map
	// mem holds the memory figure of every map the last read had, in
	// ascending id order as the iterator gives them; a read merges
	// through it into next and swaps the two, so maps gone drop out and
	// no read hashes anything.
	mem, next []memEntry
	// Refreshes counts the fdinfo reads of memory since the Reader was
	// made (tests and benchmarks read it).
	Refreshes int
}

// memEntry is a map's last memory figure and the count it was read at.
type memEntry struct {
	id    uint32
	mem   uint64
	count int64
}

// NewReader loads the iterator (unless opts.NoIterator) and falls back to
// the syscall walk, with the reason kept for Source, when the kernel
// refuses it. An error is returned only when neither can work (no
// /proc/self/fdinfo).
func NewReader(opts Options) (*Reader, error) {
	dir, err := fdinfo.Open()
	if err != nil {
		return nil, err
	}
	r := &Reader{opts: opts, dir: dir}
	if opts.NoIterator {
		r.source.Reason = "iterator not asked for"
		return r, nil
	}
	it, _, err := LoadCached(opts.CacheDir)
	if err != nil {
		r.source.Reason = fmt.Sprintf("loading iter/bpf_map: %v", err)
		return r, nil
	}
	r.it, r.source.Iterator = it, true
	return r, nil
}

// Close releases the iterator and the fdinfo directory.
func (r *Reader) Close() error {
	var errs []error
	if r.it != nil {
		errs = append(errs, r.it.Close())
	}
	errs = append(errs, r.dir.Close())
	return errors.Join(errs...)
}

// Read returns every map on the node in ascending id order. The slice is
// the Reader's and is reused by the next Read. A map freed during the
// read is left out, not an error.
func (r *Reader) Read() ([]Map, Source, error) {
	var err error
	if r.it != nil {
		err = r.readIter()
	} else {
		err = r.readSyscalls()
	}
	if err != nil {
		return nil, r.source, err
	}
	return r.maps, r.source, nil
}

func (r *Reader) readIter() error {
	var err error
	r.recs, err = r.it.Read(r.recs)
	if err != nil {
		return err
	}
	r.maps = r.maps[:0]
	r.next = r.next[:0]
	j := 0 // r.mem's first entry whose id is not below this record's
	defer func() { r.mem, r.next = r.next, r.mem }()
	for i := range r.recs {
		rec := &r.recs[i]
		m := Map{ID: rec.ID, Type: rec.Type, Name: rec.Name, KeySize: rec.KeySize, ValueSize: rec.ValueSize,
			MaxEntries: rec.MaxEntries, Flags: rec.Flags}
		switch {
		case !HashFamily(rec.Type):
			m.Entries.Reason = ReasonNotHash
		case rec.CountKnown:
			m.Entries = Entries{Count: uint64(max(rec.Count, 0)), Known: true, How: CountKfunc}
		default:
			m.Entries.Reason = ReasonNoKfunc
		}
		fd := -1
		for j < len(r.mem) && r.mem[j].id < rec.ID {
			j++
		}
		if j < len(r.mem) && r.mem[j].id == rec.ID && !needRefresh(memoryRule(rec.Type, rec.Flags), rec.CountKnown, r.mem[j].count, rec.Count) {
			r.next = append(r.next, r.mem[j])
			m.Memory, m.MemoryKnown = r.mem[j].mem, true
		} else {
			if fd, err = mapFDByID(rec.ID); errors.Is(err, unix.ENOENT) {
				continue // freed since the iterator saw it
			}
			if fd >= 0 {
				m.Memory, m.MemoryKnown = r.memlock(fd)
			}
			if m.MemoryKnown {
				r.next = append(r.next, memEntry{id: rec.ID, mem: m.Memory, count: rec.Count})
			}
		}
		if r.wantWalk(&m) {
			if fd < 0 {
				if fd, err = mapFDByID(rec.ID); errors.Is(err, unix.ENOENT) {
					continue
				}
			}
			if fd >= 0 {
				m.Entries = r.walkFD(fd, rec.KeySize, m.Entries.Reason)
			}
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		r.maps = append(r.maps, m)
	}
	return nil
}

// memlock reads the "memlock:" line of fd's fdinfo.
func (r *Reader) memlock(fd int) (uint64, bool) {
	r.Refreshes++
	var buf [512]byte
	b, err := r.dir.Read(fd, buf[:])
	if err != nil {
		return 0, false
	}
	return fdinfo.Field(b, "memlock:")
}

// bpf(2) commands and attributes used directly: cilium/ebpf's
// NewMapFromID also reads the map's info, a syscall the memory refresh
// does not need.
const (
	cmdMapGetNextKey = 4
	cmdMapGetFDByID  = 14
)

// mapFDByID opens map id (BPF_MAP_GET_FD_BY_ID); ENOENT when it is gone.
func mapFDByID(id uint32) (int, error) {
	attr := struct{ id, next, openFlags uint32 }{id: id}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, cmdMapGetFDByID, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// walkFD counts the keys of the map open as fd with BPF_MAP_GET_NEXT_KEY,
// stopping at Options.CountBound. A key deleted under the walk makes the
// kernel start again from the first key, so a map changing meanwhile can
// be over-counted, up to the bound; why is the reason kept if the count
// stays unknown.
func (r *Reader) walkFD(fd int, keySize uint32, why string) Entries {
	key := make([]byte, max(keySize, 1))
	next := make([]byte, max(keySize, 1))
	attr := struct {
		fd      uint32
		_       uint32
		key     uint64
		nextKey uint64
	}{fd: uint32(fd), nextKey: uint64(uintptr(unsafe.Pointer(&next[0])))}
	// n keys found so far; one call past the bound tells a map of
	// exactly CountBound keys from a bigger one.
	for n := 0; ; n++ {
		_, _, errno := unix.Syscall(unix.SYS_BPF, cmdMapGetNextKey, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		runtime.KeepAlive(key)
		runtime.KeepAlive(next)
		switch {
		case errno == unix.ENOENT:
			return Entries{Count: uint64(n), Known: true, How: CountWalk}
		case errno != 0:
			return Entries{Reason: fmt.Sprintf("%s; walking keys: %v", why, errno)}
		case n == r.opts.CountBound:
			return Entries{Count: uint64(n), Reason: fmt.Sprintf("%s; at least %d (the count's bound)", why, n)}
		}
		copy(key, next)
		attr.key = uint64(uintptr(unsafe.Pointer(&key[0])))
	}
}

// wantWalk says m's entries are to be counted by walking its keys.
func (r *Reader) wantWalk(m *Map) bool {
	return r.opts.CountBound > 0 && !m.Entries.Known && HashFamily(m.Type)
}
