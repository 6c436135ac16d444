package reader

import (
	"fmt"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// Options configure a Reader: the agent's scan settings (agent.Config has
// the same fields, documented there).
type Options struct {
	// NoIterator: no bpf_prog iterators, neither the scan source nor the
	// facts one.
	NoIterator bool
	// ScanSource is ScanSourceIterator, ScanSourceSyscall or "auto"
	// (empty).
	ScanSource string
	// OneShot: the reader reads once, so it caches nothing for a next
	// read and prefers a running agent's pinned iterator (scan_pin.go).
	OneShot bool
	// BPFFS are the bpffs mounts searched for that pin.
	BPFFS []string
	// Parallel is how many goroutines read programs seen for the first
	// time.
	Parallel int
	// ProcRoot is where procfs is mounted: interfaces are named in its
	// pid 1's network namespace (owners.HostNetns).
	ProcRoot string
	// CacheDir is where the iterators' CO-RE results are cached, "" for
	// no cache.
	CacheDir string
}

// New prepares a reader and chooses its scan source, once per kernel: the
// iterator when this kernel loads it (its first read is checked before
// use), else the syscall path with the reason in every read's ScanStats.
func New(o Options) *Reader {
	r := newReader()
	r.parallel = o.Parallel
	r.oneShot = o.OneShot
	r.cacheDir = o.CacheDir
	r.targets.netns, _ = owners.HostNetns(o.ProcRoot) // the attribution says a refusal
	if !o.OneShot {
		r.probeProgInfoLen()
	}
	if !o.NoIterator {
		r.loadFacts = r.loadProgIter
	}
	switch {
	case o.NoIterator:
		r.fallback = "iterator disabled by configuration"
	case o.ScanSource == ScanSourceSyscall:
		r.fallback = "syscall source chosen by configuration"
	case o.OneShot:
		// A running agent's pinned iterator costs one open; loading one
		// from the CO-RE cache a few ms, about the syscall scan of 1,000
		// programs (a third of it at 10,000); relocating one from kernel
		// BTF costs more than the syscall scan it would replace.
		var why string
		if r.iter, r.pin, why = openPinnedStatsIter(o.BPFFS); r.iter != nil {
			break
		}
		if o.ScanSource == ScanSourceIterator || progstats.Cached(o.CacheDir) {
			r.iter, r.fallback = r.loadStatsIter()
			break
		}
		r.fallback = "one scan, no pinned iterator (" + why + ") and none in the CO-RE cache: relocating one costs more than the syscall scan it replaces"
	default:
		r.iter, r.fallback = r.loadStatsIter()
	}
	return r
}

// JoinsKept says the last read found the same programs in the same slots
// and the same links as the one before, so it joined nothing: every
// program's joins (and what the agent added to them: owners, miss kind)
// are the previous read's, as they stand in its slot.
func (r *Reader) JoinsKept() bool { return r.joinsKept }

// Losses are what the reader could not do on this node, each with why;
// empty or nil: nothing lost.
type Losses struct {
	// LinkIterator: links are read by syscall although programs are
	// read by the iterator.
	LinkIterator string
	// SteadyRead: every read walks although programs are read by the
	// iterator.
	SteadyRead string
	// Facts: the bpf_prog facts iterator could not be loaded.
	Facts error
	// CgroupLinks: a cgroup link's cgroup could not be opened by id.
	CgroupLinks error
	// Interfaces: the last dump of the interfaces link targets are named
	// from failed.
	Interfaces error
	// CoreCache: the iterators' CO-RE cache could not be read or written
	// (the first such error), so every start parses kernel BTF again.
	CoreCache error
	// RecursionMisses: the kernel's bpf_prog_info has no
	// recursion_misses, so every program's is absent.
	RecursionMisses string
}

// Losses says what the reader has lost so far (the scan source's own
// fallback is Source's).
func (r *Reader) Losses() Losses {
	var l Losses
	if r.iter != nil {
		if r.lsrc.tried && r.lsrc.iter == nil {
			l.LinkIterator = r.lsrc.fallback
		}
		if sd := &r.steady; sd.tried && sd.off != "" {
			l.SteadyRead = sd.off
		}
	}
	l.Facts = r.factsErr
	l.CgroupLinks = r.targets.cgroupErr
	l.CoreCache = r.cacheErr
	l.Interfaces = r.targets.netdevErr
	if n := r.progInfoLen.Load(); n != 0 && n < bpfsys.ProgInfoEndRecursionMisses {
		l.RecursionMisses = fmt.Sprintf("the kernel's struct bpf_prog_info is %d bytes, ending before recursion_misses (bytes %d to %d)",
			n, bpfsys.ProgInfoEndRecursionMisses-8, bpfsys.ProgInfoEndRecursionMisses)
	}
	return l
}

// probeProgInfoLen asks the kernel how long its bpf_prog_info is, with the
// first program it lists, so that the agent's start line can say what
// this kernel does not count before the first scan reads every program.
// Without a program nothing is known until one is read.
func (r *Reader) probeProgInfoLen() {
	id, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, 0)
	if err != nil || !ok {
		return
	}
	fd, err := bpfsys.FDByID(bpfsys.CmdProgGetFDByID, id)
	if err != nil {
		return
	}
	defer bpfsys.CloseFD(fd)
	var info bpfsys.ProgInfo
	if n, err := bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info))); err == nil {
		r.progInfoLen.Store(n)
	}
}

// Close releases the iterators, the steady read's watcher and table and
// the fdinfo directory.
func (r *Reader) Close() {
	r.fdinfo.Close()
	if r.source != nil {
		r.source.Close()
	}
	if r.iter != nil {
		r.iter.Close()
	}
	r.closeLinks()
	r.steady.close()
}

// StatsAddr is a program's prog->stats, the raw __percpu address of its
// run-time statistics, as the bpf_prog iterator read it: 0 for a program
// the iterator has not read (the syscall scan source reads no addresses).
func (r *Reader) StatsAddr(id uint32) uint64 {
	if s := r.progs[id]; s != nil {
		return s.statsAddr
	}
	return 0
}
