package progstats

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// TestKernelFacts logs what the iterator depends on, as this kernel
// answers it (the kernel matrix records it per entry): percpu type tags in
// the kernel's BTF (which would allow bpf_per_cpu_ptr on prog->stats),
// bpf_map_lookup_percpu_elem, the possible CPUs, and whether the iterator
// loads. It fails only when the kernel has everything the iterator needs
// and it still does not load.
func TestKernelFacts(t *testing.T) {
	var u unix.Utsname
	unix.Uname(&u)
	cpus, err := PossibleCPUs()
	t.Logf("kernel %s, possible CPUs %d (%v)", unix.ByteSliceToString(u.Release[:]), cpus, err)

	tags := 0
	if spec, err := btf.LoadKernelSpec(); err != nil {
		t.Logf("kernel BTF: %v", err)
	} else {
		for typ, err := range spec.All() {
			if err != nil {
				break
			}
			if tt, ok := typ.(*btf.TypeTag); ok && tt.Value == "percpu" {
				tags++
			}
		}
		t.Logf("kernel BTF percpu type tags: %d", tags)
	}
	lookup := features.HaveProgramHelper(ebpf.SocketFilter, asm.FnMapLookupPercpuElem) // a base helper: any type answers
	t.Logf("bpf_map_lookup_percpu_elem: %v", errOrYes(lookup))
	it, _, err := LoadCached(max(cpus, 1), "")
	if err == nil {
		it.Close()
	}
	t.Logf("iterator loads: %v", errOrYes(err))
	if err != nil && lookup == nil && !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("the kernel has bpf_map_lookup_percpu_elem but the iterator fails: %v", err)
	}
}

func errOrYes(err error) string {
	if err == nil {
		return "yes"
	}
	return err.Error()
}
