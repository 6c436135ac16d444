package canary

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

func TestCanaryMissesEqualTriggers(t *testing.T) {
	c, err := Load()
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel refuses the canary: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const n = 25
	if err := c.Trigger(n); err != nil {
		t.Fatal(err)
	}
	misses, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	runs, err := c.TargetRuns()
	if err != nil {
		t.Fatal(err)
	}
	if runs != n {
		t.Errorf("canary ran %d times in this process, want %d", runs, n)
	}
	if misses != n {
		t.Errorf("kernel counted %d recursion misses, want %d (one per trigger)", misses, n)
	}
}
