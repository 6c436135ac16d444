// Package canary is a test fixture: it loads a BPF program whose every run
// is one genuine recursion miss, a known answer for testing bpfleet's miss
// accounting on a real kernel. Only tests (canarytest is their helper) and
// test programs such as test/node/canary use it; no product package does.
package canary

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// Canary is a loaded and attached recursion canary.
type Canary struct {
	objs canaryObjects
	link link.Link
}

// ErrNoRecursionGuard is the answer of a kernel that does not guard BPF
// programs against recursion (RecursionGuard). It wraps
// ebpf.ErrNotSupported.
var ErrNoRecursionGuard = fmt.Errorf("%w: the kernel has no per-program recursion guard", ebpf.ErrNotSupported)

// RecursionGuard asks the kernel whether it turns a program's nested run
// away (and counts it): nil where its struct bpf_prog_info, as the kernel's
// own BTF describes it, has recursion_misses; else an error wrapping
// ErrNoRecursionGuard with what the kernel said. The field and the
// guard of trampoline programs came in one change (Linux 5.12); on a
// kernel without them a program that re-enters its own attach point
// recurses until the kernel stack overflows (fentry on
// htab_map_delete_elem deleting from a hash map: a double fault, measured
// on 5.10), and the canary's nested bpf_printk spins forever on
// trace_printk_lock, which bpf_trace_printk holds around its tracepoint.
// Raw tracepoints got the guard later than trampolines: the field is
// necessary for the canary, and every kernel of the matrix that has it
// has both.
func RecursionGuard() error {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("%w: reading the kernel's BTF to find bpf_prog_info.recursion_misses: %v", ErrNoRecursionGuard, err)
	}
	var info *btf.Struct
	if err := spec.TypeByName("bpf_prog_info", &info); err != nil {
		return fmt.Errorf("%w: the kernel's BTF has no struct bpf_prog_info: %v", ErrNoRecursionGuard, err)
	}
	for _, m := range info.Members {
		if m.Name == "recursion_misses" {
			return nil
		}
	}
	last := "none"
	if n := len(info.Members); n > 0 {
		last = info.Members[n-1].Name
	}
	return fmt.Errorf("%w: the kernel's struct bpf_prog_info (%d bytes, its last field %s) has no recursion_misses",
		ErrNoRecursionGuard, info.Size, last)
}

// Load loads the canary and attaches it. Only its own trigger (Trigger)
// provokes misses, whatever pid namespace the caller is in.
// It fails with an error wrapping ebpf.ErrNotSupported or the kernel's errno
// when the kernel refuses tp_btf or the bpf_trace_printk tracepoint, and
// with ErrNoRecursionGuard, loading nothing, on a kernel where a trigger
// would deadlock (RecursionGuard).
func Load() (*Canary, error) {
	if err := RecursionGuard(); err != nil {
		return nil, fmt.Errorf("canary: %w", err)
	}
	spec, err := loadCanary()
	if err != nil {
		return nil, fmt.Errorf("reading canary spec: %w", err)
	}
	c := &Canary{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("loading canary: %w", err)
	}
	c.link, err = link.AttachTracing(link.TracingOptions{Program: c.objs.Canary, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("attaching canary to tp_btf/bpf_trace_printk: %w", err)
	}
	return c, nil
}

// Trigger fires the canary n times from the calling thread: each time is
// one run and one recursion miss.
func (c *Canary) Trigger(n int) error {
	in := make([]byte, 14) // the smallest packet a socket filter test run accepts
	for i := 0; i < n; i++ {
		if _, err := c.objs.Trigger.Run(&ebpf.RunOptions{Data: in}); err != nil {
			return fmt.Errorf("triggering canary: %w", err)
		}
	}
	return nil
}

// ProgramID is the kernel's id of the canary program (not of the trigger).
func (c *Canary) ProgramID() (uint32, error) {
	info, err := c.objs.Canary.Info()
	if err != nil {
		return 0, fmt.Errorf("reading canary info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("kernel does not report program ids")
	}
	return uint32(id), nil
}

// TriggerProgramID is the kernel's id of the trigger program.
func (c *Canary) TriggerProgramID() (uint32, error) {
	info, err := c.objs.Trigger.Info()
	if err != nil {
		return 0, fmt.Errorf("reading trigger info: %w", err)
	}
	id, _ := info.ID()
	return uint32(id), nil
}

// KernelMisses is the kernel's own recursion_misses of the canary, read
// directly with BPF_OBJ_GET_INFO_BY_FD: the answer bpfleet must match.
func (c *Canary) KernelMisses() (uint64, error) {
	st, err := c.objs.Canary.Stats()
	if err != nil {
		return 0, fmt.Errorf("reading canary stats: %w", err)
	}
	return st.RecursionMisses, nil
}

// TargetRuns is how many times the canary ran for its trigger, counted by
// the program itself.
func (c *Canary) TargetRuns() (uint64, error) {
	var n uint64
	if err := c.objs.TargetRuns.Get(&n); err != nil {
		return 0, fmt.Errorf("reading canary run counter: %w", err)
	}
	return n, nil
}

// Close detaches and unloads the canary.
func (c *Canary) Close() error {
	return errors.Join(c.link.Close(), c.objs.Close())
}
