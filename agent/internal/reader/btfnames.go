package reader

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// btfNames resolves (BTF object id, type id) pairs, as found in prog and
// tracing link info, to function names. Names never change for a given
// pair within a boot, so every answer (and every failure) is cached; the
// vmlinux spec is parsed only when a name is first needed.
type btfNames struct {
	vmlinux    *btf.Spec
	vmlinuxErr error
	names      map[[2]uint32]string
	specs      map[uint32]*btf.Spec // module BTF by object id
}

func newBTFNames() *btfNames {
	return &btfNames{names: map[[2]uint32]string{}, specs: map[uint32]*btf.Spec{}}
}

func (b *btfNames) kernel() (*btf.Spec, error) {
	if b.vmlinux == nil && b.vmlinuxErr == nil {
		b.vmlinux, b.vmlinuxErr = btf.LoadKernelSpec()
		if b.vmlinuxErr != nil {
			b.vmlinuxErr = fmt.Errorf("loading vmlinux BTF: %w", b.vmlinuxErr)
		}
	}
	return b.vmlinux, b.vmlinuxErr
}

// name returns the type name, or "" when it cannot be resolved.
func (b *btfNames) name(objID, typeID uint32) string {
	if objID == 0 || typeID == 0 {
		return ""
	}
	key := [2]uint32{objID, typeID}
	if n, ok := b.names[key]; ok {
		return n
	}
	n := b.resolve(objID, typeID)
	b.names[key] = n
	return n
}

func (b *btfNames) resolve(objID, typeID uint32) string {
	spec, module := b.spec(objID)
	if spec == nil {
		return ""
	}
	typ, err := spec.TypeByID(btf.TypeID(typeID))
	if err != nil {
		return ""
	}
	if module != "" {
		return typ.TypeName() + " [" + module + "]"
	}
	return typ.TypeName()
}

// spec returns the spec of a BTF object and, for a module, its name.
func (b *btfNames) spec(objID uint32) (*btf.Spec, string) {
	h, err := btf.NewHandleFromID(btf.ID(objID))
	if err != nil {
		return nil, ""
	}
	defer h.Close()
	info, err := h.Info()
	if err != nil {
		return nil, ""
	}
	base, err := b.kernel()
	if err != nil {
		return nil, ""
	}
	if info.IsVmlinux() {
		return base, ""
	}
	if s, ok := b.specs[objID]; ok {
		return s, info.Name
	}
	s, err := h.Spec(base)
	if err != nil {
		return nil, ""
	}
	b.specs[objID] = s
	return s, info.Name
}
