package misswatch

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/bpfleet/bpfleet/probes/internal/refuse"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Where a program's JIT ranges came from (Ranger.Ranges).
const (
	// RangesIterator: the kernel's own structures, read by a bpf_prog
	// iterator (ranges.bpf.c): not hidden by kptr_restrict or a missing
	// CAP_SYSLOG.
	RangesIterator = "bpf_prog iterator"
	// RangesKsyms: bpf_prog_info's jited_ksyms and jited_func_lens,
	// zeroed where the kernel hides its addresses.
	RangesKsyms = "jited_ksyms"
)

// Layout of struct range_record in ranges.bpf.c.
const (
	maxRanges       = 16
	rangeHead       = 16
	rangeRecordSize = rangeHead + maxRanges*16
)

// rangeIter is the loaded and attached ranges iterator.
type rangeIter struct {
	prog *ebpf.Program
	maps map[string]*ebpf.Map
	link *link.Iter
	buf  []byte
}

// loadRangeIter loads ranges.bpf.c, its CO-RE result cached in dir ("" for
// none). A kernel that refuses it (no BTF, no bpf_prog iterator, a
// verifier that rejects its reads) gives an error wrapping
// ebpf.ErrNotSupported in the kernel's words.
func loadRangeIter(dir string) (*rangeIter, error) {
	spec, err := loadProgranges()
	if err != nil {
		return nil, fmt.Errorf("reading ranges iterator spec: %w", err)
	}
	p := &coreload.Program{Name: "progranges", Object: _PrograngesBytes, Insns: spec.Programs["dump_ranges"].Instructions, Target: "bpf_prog"}
	it, _, err := coreload.Load(p, dir, func(c *coreload.Result) (*rangeIter, error) {
		prog, maps, err := coreload.Instantiate(spec, "dump_ranges", c, nil)
		if err != nil {
			return nil, fmt.Errorf("loading ranges iterator: %w", refuse.Iterator(err, "bpf_prog"))
		}
		it := &rangeIter{prog: prog, maps: maps, buf: make([]byte, 4096)}
		it.link, err = link.AttachIter(link.IterOptions{Program: prog})
		if err != nil {
			it.close()
			return nil, fmt.Errorf("attaching ranges iterator: %w", refuse.Iterator(err, "bpf_prog"))
		}
		return it, nil
	})
	return it, err
}

// read returns the JIT ranges of program id (nil when no such program or
// it is not JIT-compiled) and how many functions it has (0: none besides
// the main one): past maxRanges only the first ones are returned.
func (it *rangeIter) read(id uint32) ([]Range, uint32, error) {
	if err := it.maps["want"].Update(uint32(0), id, ebpf.UpdateAny); err != nil {
		return nil, 0, fmt.Errorf("setting the ranges iterator's program: %w", err)
	}
	rd, err := it.link.Open()
	if err != nil {
		return nil, 0, fmt.Errorf("opening ranges iterator: %w", err)
	}
	defer rd.Close()
	var out []Range
	var funcs uint32
	err = records.Read(rd, it.buf, rangeRecordSize, func(b []byte) {
		if le.Uint32(b[0:]) != id {
			return
		}
		out, funcs = decodeRanges(b), le.Uint32(b[4:])
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading ranges iterator: %w", err)
	}
	return out, funcs, nil
}

var le = binary.LittleEndian // both targets (amd64, arm64) are little-endian

// decodeRanges decodes one range_record's filled ranges, leaving out any
// without code (a program the interpreter runs has a jited_len of 0).
func decodeRanges(b []byte) []Range {
	nr := min(int(le.Uint32(b[8:])), maxRanges)
	var out []Range
	for i := range nr {
		o := rangeHead + i*16
		r := Range{Start: le.Uint64(b[o:]), Len: le.Uint32(b[o+8:])}
		if r.Start != 0 && r.Len != 0 {
			out = append(out, r)
		}
	}
	return out
}

func (it *rangeIter) close() error {
	return coreload.Close(it.link, it.prog, it.maps)
}

// Ranger finds programs' JIT ranges: from the bpf_prog iterator where the
// kernel loads it, else from jited_ksyms. The iterator is loaded on first
// need, so an agent whose programs never miss never loads it. Not safe
// for concurrent use.
type Ranger struct {
	dir    string
	loaded bool
	it     *rangeIter
	// IterErr says why the iterator is not used (nil when it is or
	// before it was needed).
	IterErr error
	// ksymsShown: jited_ksyms gave some program's ranges.
	ksymsShown bool
}

// NewRanger returns a Ranger whose iterator's CO-RE result is cached in
// cacheDir; where the kernel refuses the iterator, Ranges falls back to
// jited_ksyms and IterErr says why.
func NewRanger(cacheDir string) *Ranger { return &Ranger{dir: cacheDir} }

func (r *Ranger) load() {
	if !r.loaded {
		r.loaded = true
		r.it, r.IterErr = loadRangeIter(r.dir)
	}
}

// Unseen says why no program's ranges can be had, nil where they can:
// from the iterator, or from jited_ksyms, which the kernel hides exactly
// where it hides kallsyms' addresses (kallsymsErr, Symbols.Check), or once
// they gave some program's.
func (r *Ranger) Unseen(kallsymsErr error) error {
	if r.ksymsShown || kallsymsErr == nil {
		return nil
	}
	if r.load(); r.it != nil {
		return nil
	}
	return fmt.Errorf("programs' JIT code hidden (jited_ksyms read as zeros, as %v; bpf_prog iterator: %v)", kallsymsErr, r.IterErr)
}

// Ranges returns where program id's JIT code lies and the source that said
// so; empty where no source shows it (hidden addresses without the
// iterator, a program the interpreter runs).
func (r *Ranger) Ranges(id uint32) ([]Range, string, error) {
	if r.load(); r.it != nil {
		out, _, err := r.it.read(id)
		return out, RangesIterator, err
	}
	out, err := ProgramRanges(id)
	if len(out) > 0 {
		r.ksymsShown = true
	}
	return out, RangesKsyms, err
}

// Close unloads the iterator.
func (r *Ranger) Close() error {
	if r.it == nil {
		return nil
	}
	return r.it.close()
}
