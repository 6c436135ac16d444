// Package canarytest loads the recursion canary for tests in other
// packages, the way each of them needs it: skipped with the kernel's
// reason where it is refused, closed when the test ends.
package canarytest

import (
	"errors"
	"testing"

	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/cilium/ebpf"
)

// Load loads and attaches the canary and returns it with its program id.
func Load(tb testing.TB) (*canary.Canary, uint32) {
	tb.Helper()
	c, err := canary.Load()
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel refuses the recursion canary: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	id, err := c.ProgramID()
	if err != nil {
		tb.Fatal(err)
	}
	return c, id
}
