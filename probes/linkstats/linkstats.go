// Package linkstats reads, in one pass of a BPF iterator over every link in
// the kernel (iter/bpf_link, Linux 5.19+), what BPF_OBJ_GET_INFO_BY_FD says
// about each link: id, type, program id and the type's part of struct
// bpf_link_info (attach type, target ids, cgroup, interface, tracepoint,
// iterator or kprobe function name, and the kprobe `missed` counters, split
// into nesting and maxactive),
// read from the same kernel structs the kernel's fill_link_info callbacks
// read. No link fd is opened.
package linkstats

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// InfoLen is the size of the bpf_link_info union a Record carries.
const InfoLen = 64

// Record is what the iterator reports about one link.
type Record struct {
	ID   uint32
	Type uint32 // enum bpf_link_type
	// Whole is false for a link up to SetKnownMaxID's id that is not a
	// kprobe_multi or perf_event link: the record then has only ID and
	// Type (the rest of a link never changes).
	Whole    bool
	ProgID   uint32
	ProgType uint32 // enum bpf_prog_type of the link's program
	// Known says Info holds every field of the link's type that the kernel
	// fills in bpf_link_info, except pointers, name lengths, kernel
	// addresses, cookies and netfilter flags (which no bpfleet reader
	// uses), and Name the link's name where the type has one. When false
	// (a type or kernel struct this program cannot read) the caller reads
	// the link by syscall.
	Known bool
	// InfoSize is the running kernel's sizeof(struct bpf_link_info): what
	// BPF_OBJ_GET_INFO_BY_FD reports as info_len to a reader with a
	// larger struct. A field ending beyond it is absent on this kernel.
	InfoSize uint32
	// Info is the union of struct bpf_link_info in its uapi layout.
	Info [InfoLen]byte
	// Name is the raw tracepoint, iterator target, perf tracepoint or
	// kprobe function name, as the kernel copies it to a name buffer.
	Name string
	// Split says Nesting and Maxactive hold the two parts of the kprobe
	// link's missed (see MissedSplit); false where the kernel does not
	// tell them apart or its structs lack a part's counter.
	Split     bool
	Nesting   uint64
	Maxactive uint64
}

// Link types and perf event kinds (uapi) that carry a missed counter.
const (
	linkTypePerfEvent   = 7
	linkTypeKprobeMulti = 8
	perfKprobe          = 3
	perfKretprobe       = 4
)

// Missed is the kprobe's own missed counter of a kprobe_multi or perf_event
// kprobe link, where the kernel's link info has one (Linux 6.7+).
func (r *Record) Missed() (uint64, bool) {
	le := binary.LittleEndian
	const hdr = 16 // bpf_link_info's header before the union
	switch {
	case !r.Known:
	case r.Type == linkTypeKprobeMulti && r.InfoSize >= hdr+24:
		return le.Uint64(r.Info[16:]), true
	case r.Type == linkTypePerfEvent && r.InfoSize >= hdr+40:
		if t := le.Uint32(r.Info[0:]); t == perfKprobe || t == perfKretprobe {
			return le.Uint64(r.Info[32:]), true
		}
	}
	return 0, false
}

// MissedSplit is the kprobe link's missed in its two parts, which add up
// to Missed: nesting, the runs its kprobe skipped because another kprobe
// was running on that CPU (the kprobe's nmissed; a kprobe_multi entry
// probe's fprobe nmissed), and maxactive, the returns a kretprobe could
// not catch because every instance was in use (the kretprobe's nmissed; 0
// for a plain kprobe). ok is false where the split is unknown: no missed
// on this kernel, a part's counter absent from its structs, or a
// kprobe_multi return probe, whose one counter mixes both.
func (r *Record) MissedSplit() (nesting, maxactive uint64, ok bool) {
	if _, has := r.Missed(); !has || !r.Split {
		return 0, 0, false
	}
	return r.Nesting, r.Maxactive, true
}

// Layout of struct link_record in linkstats.bpf.c.
const (
	recordSize   = 168
	infoOff      = 24
	nameOff      = 88
	nameLen      = 64
	nestingOff   = 152
	maxactiveOff = 160
	flagKnown    = 1 << 0
	flagName     = 1 << 1
	flagWhole    = 1 << 2
	flagSplit    = 1 << 3
)

const bufSize = 32 << 10

// Kernel enumerators the program needs (anonymous enum trace_event_flags,
// whose values moved between kernels), and the .rodata variables they go
// to.
var enums = map[string]string{
	"TRACE_EVENT_FL_TRACEPOINT": "fl_tracepoint",
	"TRACE_EVENT_FL_KPROBE":     "fl_kprobe",
}

// Iter is a loaded and attached iterator. It is not safe for concurrent use.
type Iter struct {
	prog   *ebpf.Program
	maps   map[string]*ebpf.Map
	known  coreload.KnownMaxID
	link   *link.Iter
	progID uint32
	buf    []byte
	names  records.Strings
}

// LoadCached loads and attaches the iterator with its CO-RE result cached
// in dir ("" for none: relocated from kernel BTF; the agent passes the
// directory internal/config chose). When the kernel refuses it the error
// wraps ebpf.ErrNotSupported and says why.
func LoadCached(dir string) (*Iter, coreload.LoadInfo, error) {
	spec, err := loadLinkstats()
	if err != nil {
		return nil, coreload.LoadInfo{}, fmt.Errorf("reading bpf_link iterator spec: %w", err)
	}
	p := &coreload.Program{Name: "linkstats", Object: _LinkstatsBytes, Insns: spec.Programs["dump_link"].Instructions, Target: "bpf_link"}
	for e := range enums {
		p.Enums = append(p.Enums, e)
	}
	return coreload.Load(p, dir, func(c *coreload.Result) (*Iter, error) { return load(spec, c) })
}

func load(spec *ebpf.CollectionSpec, c *coreload.Result) (*Iter, error) {
	vars := map[string]uint32{}
	for e, v := range enums {
		vars[v] = uint32(c.Enums[e]) // 0 where the kernel has no such flag: the program then asks for a syscall read
	}
	prog, maps, err := coreload.Instantiate(spec, "dump_link", c, vars)
	if err != nil {
		return nil, err
	}
	it := &Iter{prog: prog, maps: maps, known: coreload.NewKnownMaxID(maps, "link"), buf: make([]byte, bufSize), names: records.NewStrings()}
	if it.link, it.progID, err = coreload.Attach(prog, "bpf_link"); err != nil {
		it.Close()
		return nil, err
	}
	return it, nil
}

// SetKnownMaxID tells the iterator that the caller holds the fields of
// every link up to id: later reads give only ID and Type for those (Whole
// false), except kprobe_multi and perf_event links, whose missed counters
// change. Link ids only grow (until they wrap after 2^31 links), so a link
// up to id that the caller does not hold was unreadable or gone in its
// last read; the caller reads it by syscall. 0 asks for whole records.
func (it *Iter) SetKnownMaxID(id uint32) error { return it.known.Set(id) }

// ProgramID is the id of the iterator program itself.
func (it *Iter) ProgramID() uint32 { return it.progID }

// Read runs one pass of the iterator and returns dst[:0] with one Record
// per link appended, in ascending id order (the kernel walks its link idr
// in order).
func (it *Iter) Read(dst []Record) ([]Record, error) {
	dst = dst[:0]
	rd, err := it.link.Open()
	if err != nil {
		return dst, fmt.Errorf("opening bpf_link iterator: %w", err)
	}
	defer rd.Close()
	err = records.Read(rd, it.buf, recordSize, func(b []byte) {
		dst = append(dst, Record{})
		it.decode(b, &dst[len(dst)-1])
	})
	if err != nil {
		return dst[:0], fmt.Errorf("reading bpf_link iterator: %w", err)
	}
	return dst, nil
}

func (it *Iter) decode(b []byte, r *Record) {
	le := binary.LittleEndian // both targets (amd64, arm64) are little-endian
	flags := le.Uint32(b[12:])
	*r = Record{
		ID:       le.Uint32(b[0:]),
		Type:     le.Uint32(b[4:]),
		Whole:    flags&flagWhole != 0,
		ProgID:   le.Uint32(b[8:]),
		Known:    flags&flagKnown != 0,
		InfoSize: le.Uint32(b[16:]),
		ProgType: le.Uint32(b[20:]),
	}
	if flags&flagSplit != 0 {
		r.Split = true
		r.Nesting = le.Uint64(b[nestingOff:])
		r.Maxactive = le.Uint64(b[maxactiveOff:])
	}
	copy(r.Info[:], b[infoOff:infoOff+InfoLen])
	if flags&flagName != 0 {
		r.Name = it.names.Get(b[nameOff : nameOff+nameLen])
	}
}

// Close detaches and unloads the iterator.
func (it *Iter) Close() error {
	return coreload.Close(it.link, it.prog, it.maps)
}
