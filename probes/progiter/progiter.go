// Package progiter reads, in one pass of a BPF iterator over every program
// in the kernel, what bpf_prog_info does not expose: each program's expected
// attach type, its sleepable flag and the kernel function it targets. That is
// what tells fentry.s from fentry and lsm.s from lsm on any kernel.
package progiter

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/bpfleet/bpfleet/probes/internal/refuse"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Record is what the iterator reports about one BPF program.
type Record struct {
	ID                 uint32
	Type               uint32 // enum bpf_prog_type
	ExpectedAttachType uint32 // enum bpf_attach_type, as given at load
	Sleepable          bool
	// SleepableKnown is false when the running kernel has the flag in
	// neither place CO-RE looks (prog->sleepable, prog->aux->sleepable).
	SleepableKnown bool
	AttachFunc     string // aux->attach_func_name, "" when the program has none
	AttachBTFID    uint32 // BTF type id of the target in the target's BTF object
	// AttachBTFObjID is the id of the BTF object (vmlinux, a module, a BPF
	// program's BTF) holding AttachBTFID; 0 when none or not known.
	AttachBTFObjID uint32
	// AttachBTFObjKnown is false where the kernel's bpf_prog_aux has no
	// attach_btf (before Linux 5.11): AttachBTFObjID is then 0 whatever
	// the target's object.
	AttachBTFObjKnown bool
	// DstProgID is the target program of an extension or fentry-on-BPF
	// program that is loaded but not attached yet (the kernel forgets it on
	// attach); 0 otherwise.
	DstProgID uint32
}

// Layout of struct prog_record in progiter.bpf.c.
const (
	recordSize    = 96
	attachFuncOff = 32
	attachFuncLen = 64

	flagSleepable         = 1 << 0
	flagSleepableKnown    = 1 << 1
	flagAttachBTFObjKnown = 1 << 3 // F_ATTACH_BTF_OBJ_KNOWN in prog_facts.h
)

// The kernel hands out at most a few pages of the seq_file per read(); a
// buffer of 64 KiB takes a whole chunk even with 64 KiB pages, so a scan of
// 1,000 programs is a handful of reads.
const bufSize = 64 << 10

// Iter is a loaded and attached bpf_prog iterator. It is not safe for
// concurrent use.
type Iter struct {
	prog   *ebpf.Program
	maps   map[string]*ebpf.Map
	link   *link.Iter
	progID uint32
	buf    []byte
	// names interns attach function names so that steady-state scans
	// allocate no strings: the set of distinct targets on a node is small.
	names records.Strings
}

// LoadInfo says how a load went, for callers that report or measure it.
type LoadInfo = coreload.LoadInfo

// LoadCached loads the iterator program and attaches it, its CO-RE result
// cached in dir ("" for no cache; probes/internal/coreload): cilium/ebpf's
// loader parses the whole vmlinux BTF on every load, ~25 ms of a one-shot
// list that meets one tracing program. When the kernel refuses it (no BTF,
// no bpf_prog iterator, a verifier that rejects the CO-RE reads) the error
// wraps ebpf.ErrNotSupported and says why; missing privileges are reported
// as the kernel's EPERM.
func LoadCached(dir string) (*Iter, LoadInfo, error) {
	spec, err := loadProgiter()
	if err != nil {
		return nil, LoadInfo{}, fmt.Errorf("reading bpf_prog iterator spec: %w", err)
	}
	p := &coreload.Program{Name: "progiter", Object: _ProgiterBytes, Insns: spec.Programs["dump_prog"].Instructions, Target: "bpf_prog"}
	return coreload.Load(p, dir, func(c *coreload.Result) (*Iter, error) {
		prog, maps, err := coreload.Instantiate(spec, "dump_prog", c, nil)
		if err != nil {
			return nil, fmt.Errorf("loading iter/bpf_prog: %w", refuse.Iterator(err, "bpf_prog"))
		}
		it := &Iter{prog: prog, maps: maps, buf: make([]byte, bufSize), names: records.NewStrings()}
		it.link, err = link.AttachIter(link.IterOptions{Program: prog})
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("attaching iter/bpf_prog: %w", refuse.Iterator(err, "bpf_prog"))
		}
		if it.progID, err = coreload.ProgramID(prog); err != nil {
			it.Close()
			return nil, err
		}
		return it, nil
	})
}

// ProgramID is the id of the iterator program itself, so that a caller
// listing programs can recognise its own.
func (it *Iter) ProgramID() uint32 { return it.progID }

// Read runs one pass of the iterator and replaces the contents of dst with
// one Record per program in the kernel, keyed by program id.
func (it *Iter) Read(dst map[uint32]Record) error {
	clear(dst)
	rd, err := it.link.Open()
	if err != nil {
		return fmt.Errorf("opening bpf_prog iterator: %w", err)
	}
	defer rd.Close()

	err = records.Read(rd, it.buf, recordSize, func(b []byte) {
		r := it.decode(b)
		dst[r.ID] = r
	})
	if err != nil {
		return fmt.Errorf("reading bpf_prog iterator: %w", err)
	}
	return nil
}

func (it *Iter) decode(b []byte) Record {
	le := binary.LittleEndian // both targets (amd64, arm64) are little-endian
	flags := le.Uint32(b[24:])
	r := Record{
		ID:                 le.Uint32(b[0:]),
		Type:               le.Uint32(b[4:]),
		ExpectedAttachType: le.Uint32(b[8:]),
		AttachBTFID:        le.Uint32(b[12:]),
		AttachBTFObjID:     le.Uint32(b[16:]),
		DstProgID:          le.Uint32(b[20:]),
		Sleepable:          flags&flagSleepable != 0,
		SleepableKnown:     flags&flagSleepableKnown != 0,
		AttachBTFObjKnown:  flags&flagAttachBTFObjKnown != 0,
	}
	r.AttachFunc = it.names.Get(b[attachFuncOff : attachFuncOff+attachFuncLen])
	return r
}

// Close detaches and unloads the iterator.
func (it *Iter) Close() error {
	return coreload.Close(it.link, it.prog, it.maps)
}
