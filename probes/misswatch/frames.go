package misswatch

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// ProgramRanges reads where a program's JIT code lies (its main program
// and subprograms: bpf_prog_info's jited_ksyms and jited_func_lens), so a
// stack tells the program's own frames without kallsyms. It opens the
// program by id for the read and closes it at once. Empty, without error,
// where the kernel hides kernel addresses (kptr_restrict without
// CAP_SYSLOG zeroes them).
func ProgramRanges(id uint32) ([]Range, error) {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, fmt.Errorf("opening program %d: %w", id, err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return nil, fmt.Errorf("reading program %d info: %w", id, err)
	}
	addrs, _ := info.JitedKsymAddrs()
	lens, _ := info.JitedFuncLens()
	var out []Range
	for i, a := range addrs {
		if a == 0 || i >= len(lens) {
			continue
		}
		out = append(out, Range{Start: uint64(a), Len: lens[i]})
	}
	if len(out) == 0 && len(addrs) == 0 {
		// One function and a kernel that reports no ksyms (older ones
		// leave them out for programs without subprograms): jited_len
		// from the first address cannot be had either, so nothing.
		return nil, nil
	}
	return out, nil
}

// Frames resolves a sampled stack: each address's symbol (syms may be
// nil) and whether it is in the program's own code (ranges).
func Frames(stack []uint64, ranges []Range, syms *Symbols) []Frame {
	if syms != nil {
		syms.Resolve(stack)
	}
	out := make([]Frame, len(stack))
	for i, a := range stack {
		f := Frame{Addr: a}
		if syms != nil {
			f.Sym = BaseName(syms.Name(a))
		}
		for _, r := range ranges {
			if a >= r.Start && a < r.Start+uint64(r.Len) {
				f.Own, f.OwnOff = true, a-r.Start
				break
			}
		}
		out[i] = f
	}
	return out
}
