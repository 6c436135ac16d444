// Package mappressure is the agent's own probe of map pressure: how many
// entries each LRU hash map evicted, and (Refusals) how many updates each
// hash-family map refused because it was full. The kernel keeps no such counter, so
// an fexit program on htab_lru_map_delete_node(), the LRU's delete callback
// that every eviction of LRU_HASH and LRU_PERCPU_HASH maps goes through,
// counts them per map id (mappressure.bpf.c; ARCHITECTURE.md, "Maps").
//
// The counts start when the probe is attached: evictions of a map before
// that are not known to anyone. Kernels that refuse trampoline programs
// (lockdown, no BTF) refuse the probe: Load's error then wraps
// ebpf.ErrNotSupported and says the kernel's reason.
package mappressure

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// EvictTarget is the kernel function the eviction counter attaches to.
const EvictTarget = "htab_lru_map_delete_node"

// Refused is the kernel refusing the probe, with its reason in one line
// ("load: operation not permitted"). It wraps ebpf.ErrNotSupported.
type Refused struct {
	Stage string // "load" or "attach"
	Err   error
}

func (r *Refused) Error() string {
	return fmt.Sprintf("map pressure probe (fexit on %s): %s: %v", EvictTarget, r.Stage, r.Err)
}

// Reason is the stage and the kernel's errno, or the whole error.
func (r *Refused) Reason() string {
	var errno unix.Errno
	if errors.As(r.Err, &errno) {
		return r.Stage + ": " + errno.Error()
	}
	return r.Stage + ": " + r.Err.Error()
}

func (r *Refused) Unwrap() error { return r.Err }

// Is makes errors.Is(err, ebpf.ErrNotSupported) true.
func (r *Refused) Is(target error) bool { return target == ebpf.ErrNotSupported }

// refused says whether err is the kernel saying no to a tracing program
// (rather than, say, an out-of-memory): lockdown's EPERM, a kernel without
// the target or trampolines (ENOENT, EINVAL, ENOTSUPP), BTF missing.
func refused(err error) bool {
	var errno unix.Errno
	if errors.Is(err, ebpf.ErrNotSupported) {
		return true
	}
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.EPERM, unix.EACCES, unix.EINVAL, unix.ENOENT, unix.EOPNOTSUPP, unix.ESRCH, unix.ENOSYS, 524 /* ENOTSUPP */ :
		return true
	}
	return false
}

// Probe is the loaded and attached eviction counter. Read and Forget may
// be called from one goroutine at a time.
type Probe struct {
	coll    *ebpf.Collection
	counts  *ebpf.Map
	dropped *ebpf.Variable
	link    link.Link
}

// parsedSpec parses the embedded object once; each Load works on a copy.
var parsedSpec = sync.OnceValues(loadMappressure)

// Load loads the eviction counter and attaches it. A kernel that refuses
// it gives a *Refused (wrapping ebpf.ErrNotSupported).
func Load() (*Probe, error) {
	spec, err := parsedSpec()
	if err != nil {
		return nil, fmt.Errorf("reading map pressure spec: %w", err)
	}
	coll, err := ebpf.NewCollection(only(spec, "count_eviction", "evictions"))
	if err != nil {
		if refused(err) {
			return nil, &Refused{Stage: "load", Err: err}
		}
		return nil, fmt.Errorf("loading map pressure probe: %w", err)
	}
	p := &Probe{coll: coll, counts: coll.Maps["evictions"], dropped: coll.Variables["dropped"]}
	p.link, err = link.AttachTracing(link.TracingOptions{Program: coll.Programs["count_eviction"]})
	if err != nil {
		coll.Close()
		if refused(err) {
			return nil, &Refused{Stage: "attach", Err: err}
		}
		return nil, fmt.Errorf("attaching map pressure probe: %w", err)
	}
	return p, nil
}

// only is a copy of spec with program prog and, of the maps, keep and the
// globals: each probe loads its own part of the object.
func only(spec *ebpf.CollectionSpec, prog, keep string) *ebpf.CollectionSpec {
	s := spec.Copy()
	for n := range s.Programs {
		if n != prog {
			delete(s.Programs, n)
		}
	}
	for n := range s.Maps {
		if n != keep && !strings.HasPrefix(n, ".") {
			delete(s.Maps, n)
		}
	}
	return s
}

// Read fills dst (cleared first) with each map id's evictions since the
// probe was attached; only maps that evicted are present.
func (p *Probe) Read(dst map[uint32]uint64) error {
	return readCounts(p.counts, dst, func(id uint32) uint32 { return id }, "evictions")
}

// Dropped is how many evictions were not counted because the probe's own
// table was full (more maps evicting than it holds).
func (p *Probe) Dropped() (uint64, error) { return readDropped(p.dropped, "evictions") }

// Forget deletes the counts of maps that are gone, so their ids' entries
// are free for maps that evict later. Map ids are never reused while the
// kernel runs, so a gone id never comes back.
func (p *Probe) Forget(ids []uint32) error {
	return forget(p.counts, ids, func(id uint32) uint32 { return id })
}

// readCounts fills dst (cleared first) with every entry of counts, by the
// map id mapID takes from its key.
func readCounts[K, V any](counts *ebpf.Map, dst map[uint32]V, mapID func(K) uint32, what string) error {
	clear(dst)
	var k K
	var v V
	it := counts.Iterate()
	for it.Next(&k, &v) {
		dst[mapID(k)] = v
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", what, err)
	}
	return nil
}

// readDropped reads a probe's count of what its full table could not hold.
func readDropped(dropped *ebpf.Variable, what string) (uint64, error) {
	var n uint64
	if err := dropped.Get(&n); err != nil {
		return 0, fmt.Errorf("reading dropped %s: %w", what, err)
	}
	return n, nil
}

// forget deletes the entries of counts for the maps ids (gone), key making
// each entry's key.
func forget[K any](counts *ebpf.Map, ids []uint32, key func(uint32) K) error {
	for _, id := range ids {
		if err := counts.Delete(key(id)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("forgetting map %d: %w", id, err)
		}
	}
	return nil
}

// ProgramID is the kernel's id of the probe's program, so a scan can tell
// the agent's own program from others.
func (p *Probe) ProgramID() (ebpf.ProgramID, error) {
	info, err := p.coll.Programs["count_eviction"].Info()
	if err != nil {
		return 0, fmt.Errorf("reading map pressure probe info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("kernel reports no id for the map pressure probe")
	}
	return id, nil
}

// Close detaches and unloads the probe.
func (p *Probe) Close() error {
	err := p.link.Close()
	p.coll.Close()
	return err
}
