package mapstats

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
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
	// CacheDir is the CO-RE cache directory, "" for none.
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
	// cacheErr is why the CO-RE cache could not be read or written at
	// load (the iterator loaded all the same), nil otherwise.
	cacheErr error
	dir      bpfsys.FdinfoDir
	recs     []Record
	// maps is what the last read returned, in ascending id order as the
	// iterator walks them, and memAt the count each map's memory was read
	// at. The next read merges the iterator's records through them into
	// prev and prevAt and swaps the pairs: the shape, name and memory of a
	// map it holds are taken from there (the iterator writes only the
	// count of such a map), maps gone drop out, and nothing is hashed.
	maps, prev    []Map
	memAt, prevAt []int64
	// Refreshes counts the fdinfo reads of memory since the Reader was
	// made (tests and benchmarks read it).
	Refreshes int
}

// NewReader loads the iterator (unless opts.NoIterator) and falls back to
// the syscall walk, with the reason kept for Source, when the kernel
// refuses it. An error is returned only when neither can work (no
// /proc/self/fdinfo).
func NewReader(opts Options) (*Reader, error) {
	r := &Reader{opts: opts, dir: bpfsys.NewFdinfoDir()}
	if err := r.dir.Open(); err != nil {
		return nil, err
	}
	if opts.NoIterator {
		r.source.Reason = "iterator not asked for"
		return r, nil
	}
	it, li, err := LoadCached(opts.CacheDir)
	r.cacheErr = li.CacheErr
	if err != nil {
		r.source.Reason = fmt.Sprintf("loading iter/bpf_map: %v", err)
		return r, nil
	}
	r.it, r.source.Iterator = it, true
	return r, nil
}

// Source says how reads read the maps: the iterator, or the syscall walk
// and why.
func (r *Reader) Source() Source { return r.source }

// CacheErr says why the iterator's CO-RE cache could not be read or
// written (each start then parses kernel BTF again); nil when it could,
// or with no iterator or no cache asked for.
func (r *Reader) CacheErr() error { return r.cacheErr }

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
// the Reader's: it is valid until the next Read. A map freed during the
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
	held, heldAt := r.maps, r.memAt
	r.maps, r.memAt = r.prev[:0], r.prevAt[:0]
	j := 0 // held's first map whose id is not below this record's
	for i := range r.recs {
		rec := &r.recs[i]
		for j < len(held) && held[j].ID < rec.ID {
			j++
		}
		have := j < len(held) && held[j].ID == rec.ID
		var m Map
		switch {
		case rec.Whole:
			m = Map{ID: rec.ID, Type: rec.Type, Name: rec.Name, KeySize: rec.KeySize, ValueSize: rec.ValueSize,
				MaxEntries: rec.MaxEntries, Flags: rec.Flags}
		case have:
			m = held[j]
		default:
			// Up to the known id but not held: skipped by the last read.
			var err error
			if m, err = r.readOne(ebpf.MapID(rec.ID), ""); err != nil {
				continue // gone, or unreadable by syscall as well
			}
			have = false
		}
		m.Entries = r.entries(m.Type, rec)
		fd := -1
		if have && held[j].MemoryKnown && !needRefresh(memoryRule(m.Type, m.Flags), rec.CountKnown, heldAt[j], rec.Count) {
			m.Memory, m.MemoryKnown = held[j].Memory, true
		} else if rec.Whole || have {
			if fd, err = bpfsys.FDByID(bpfsys.CmdMapGetFDByID, rec.ID); errors.Is(err, unix.ENOENT) {
				continue // freed since the iterator saw it
			}
			m.Memory, m.MemoryKnown = 0, false
			if fd >= 0 {
				m.Memory, m.MemoryKnown = r.memlock(fd)
			}
		}
		if r.wantWalk(&m) {
			if fd < 0 {
				if fd, err = bpfsys.FDByID(bpfsys.CmdMapGetFDByID, rec.ID); errors.Is(err, unix.ENOENT) {
					continue
				}
			}
			if fd >= 0 {
				m.Entries = r.walkFD(fd, m.KeySize, m.Entries.Reason)
			}
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		r.maps = append(r.maps, m)
		r.memAt = append(r.memAt, rec.Count)
	}
	r.prev, r.prevAt = held, heldAt
	if n := len(r.maps); n > 0 {
		return r.it.SetKnownMaxID(r.maps[n-1].ID)
	}
	return nil
}

// entries is a map's element count as the iterator's record gives it.
func (r *Reader) entries(t ebpf.MapType, rec *Record) Entries {
	switch {
	case !HashFamily(t):
		return Entries{Reason: ReasonNotHash}
	case rec.CountKnown:
		return Entries{Count: uint64(max(rec.Count, 0)), Known: true, How: CountKfunc}
	}
	return Entries{Reason: ReasonNoKfunc}
}

// memlock reads the "memlock:" line of fd's fdinfo.
func (r *Reader) memlock(fd int) (uint64, bool) {
	r.Refreshes++
	var buf [512]byte
	b, err := r.dir.Read(fd, buf[:])
	if err != nil {
		return 0, false
	}
	return bpfsys.Field(b, "memlock:")
}

// walkFD counts the keys of the map open as fd with BPF_MAP_GET_NEXT_KEY,
// stopping at Options.CountBound. A key deleted under the walk makes the
// kernel start again from the first key, so a map changing meanwhile can
// be over-counted, up to the bound; why is the reason kept if the count
// stays unknown.
func (r *Reader) walkFD(fd int, keySize uint32, why string) Entries {
	key := make([]byte, max(keySize, 1))
	next := make([]byte, max(keySize, 1))
	// n keys found so far; one call past the bound tells a map of
	// exactly CountBound keys from a bigger one.
	for n := 0; ; n++ {
		var prev []byte // the first key
		if n > 0 {
			prev = key
		}
		err := bpfsys.MapNextKey(fd, prev, next)
		switch {
		case errors.Is(err, unix.ENOENT):
			return Entries{Count: uint64(n), Known: true, How: CountWalk}
		case err != nil:
			return Entries{Reason: fmt.Sprintf("%s; walking keys: %v", why, err)}
		case n == r.opts.CountBound:
			return Entries{Count: uint64(n), Reason: fmt.Sprintf("%s; at least %d (the count's bound)", why, n)}
		}
		copy(key, next)
	}
}

// wantWalk says m's entries are to be counted by walking its keys.
func (r *Reader) wantWalk(m *Map) bool {
	return r.opts.CountBound > 0 && !m.Entries.Known && HashFamily(m.Type)
}
