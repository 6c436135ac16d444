package ktest

import (
	"testing"

	"github.com/bpfleet/bpfleet/internal/bpfsys/layoutcheck"
)

// TestLayoutsMatchKernelBTF holds internal/bpfsys's hand-written bpf(2)
// layouts to this kernel's BTF: an offset an older or newer kernel moved
// would read another field's bytes.
func TestLayoutsMatchKernelBTF(t *testing.T) { layoutcheck.Run(t) }
