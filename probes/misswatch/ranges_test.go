package misswatch_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfleet/bpfleet/probes/misswatch"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// loadWithSubprograms loads a socket filter of subs+1 functions (the main
// one calling each subprogram) and returns it.
func loadWithSubprograms(t *testing.T, subs int) *ebpf.Program {
	t.Helper()
	insns := asm.Instructions{asm.Mov.Imm(asm.R6, 0)}
	for i := range subs {
		insns = append(insns, asm.Call.Label(subName(i)), asm.Add.Reg(asm.R6, asm.R0))
	}
	insns = append(insns, asm.Mov.Reg(asm.R0, asm.R6), asm.Return())
	for i := range subs {
		// Each subprogram a different length, so a range read from the
		// wrong function does not match by chance.
		insns = append(insns, asm.Mov.Imm(asm.R0, int32(i)).WithSymbol(subName(i)))
		for range i {
			insns = append(insns, asm.Add.Imm(asm.R0, 1))
		}
		insns = append(insns, asm.Return())
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("loading a program with %d subprograms: %v", subs, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func subName(i int) string { return "sub" + string(rune('a'+i)) }

// TestRangerReadsKernelStructures: the ranges the bpf_prog iterator reads
// from the kernel's structures are the program's functions, one per
// function, each where jited_ksyms says (where the kernel shows
// jited_ksyms; where it hides them, as under kptr_restrict=2, the
// iterator's ranges must still be there, one per function). A program of
// more functions than the record holds gives the first ones.
func TestRangerReadsKernelStructures(t *testing.T) {
	r := misswatch.NewRanger("")
	defer r.Close()
	if _, _, err := r.Ranges(1 << 31); err != nil {
		t.Fatal(err)
	}
	if r.IterErr != nil {
		if errors.Is(r.IterErr, ebpf.ErrNotSupported) {
			expect.SkipUnlessExpected(t, expect.FeatProgRanges, r.IterErr)
		}
		t.Fatal(r.IterErr)
	}
	for _, subs := range []int{0, 1, 3, 20} {
		p := loadWithSubprograms(t, subs)
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		got, src, err := r.Ranges(uint32(id))
		if err != nil {
			t.Fatal(err)
		}
		if src != misswatch.RangesIterator {
			t.Fatalf("source %q, want the iterator", src)
		}
		want := min(subs+1, 16)
		if len(got) != want {
			t.Fatalf("%d subprograms: %d ranges from the iterator, want %d: %+v", subs, len(got), want, got)
		}
		ksyms, err := misswatch.ProgramRanges(uint32(id))
		if err != nil {
			t.Fatal(err)
		}
		if len(ksyms) == 0 {
			t.Logf("%d subprograms: jited_ksyms hidden by this kernel; iterator ranges %+v", subs, got)
			continue
		}
		for i, g := range got {
			if i >= len(ksyms) || g != ksyms[i] {
				t.Fatalf("%d subprograms: iterator range %d is %+v, jited_ksyms say %+v", subs, i, g, ksyms)
			}
		}
	}
	// A program that is gone: no ranges, no error.
	if got, _, err := r.Ranges(1 << 31); err != nil || len(got) != 0 {
		t.Fatalf("ranges of no program: %+v, %v", got, err)
	}
}
