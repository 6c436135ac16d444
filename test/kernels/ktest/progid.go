package ktest

import (
	"testing"

	"github.com/cilium/ebpf"
)

// ProgramID is the kernel's id of p, failing the test when the kernel gives
// none. Shared by the kernel-matrix test packages.
func ProgramID(t testing.TB, p *ebpf.Program) uint32 {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatalf("reading program info: %v", err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel reports no program id")
	}
	return uint32(id)
}
