package bpfsys_test

import (
	"testing"

	"github.com/bpfleet/bpfleet/internal/bpfsys/layoutcheck"
)

// TestLayoutsMatchKernelBTF holds the hand-written layouts to the host
// kernel's BTF (test/kernels/ktest does the same on every matrix kernel).
func TestLayoutsMatchKernelBTF(t *testing.T) { layoutcheck.Run(t) }
