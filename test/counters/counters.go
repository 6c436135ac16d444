// Package counters is a test fixture: it loads raw_tp, tp_btf and
// tracepoint programs on a tracepoint the caller fires itself, for tests
// that need exact run counts of real attached programs. No product package
// uses it.
package counters

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Set is the three attached counting programs and their trigger.
type Set struct {
	objs  countersObjects
	links []link.Link
}

// Load loads and attaches the counters, armed for the calling process.
func Load() (*Set, error) {
	spec, err := loadCounters()
	if err != nil {
		return nil, fmt.Errorf("reading counters spec: %w", err)
	}
	if err := spec.Variables["target_tgid"].Set(uint32(os.Getpid())); err != nil {
		return nil, fmt.Errorf("arming counters: %w", err)
	}
	s := &Set{}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return nil, fmt.Errorf("loading counters: %w", err)
	}
	attach := func(name string, f func() (link.Link, error)) error {
		l, err := f()
		if err != nil {
			return fmt.Errorf("attaching %s: %w", name, err)
		}
		s.links = append(s.links, l)
		return nil
	}
	err = errors.Join(
		attach("raw_tp", func() (link.Link, error) {
			return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "bpf_test_finish", Program: s.objs.CountRawTp})
		}),
		attach("tp_btf", func() (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: s.objs.CountTpBtf, AttachType: ebpf.AttachTraceRawTp})
		}),
		attach("tracepoint", func() (link.Link, error) {
			return link.Tracepoint("bpf_test_run", "bpf_test_finish", s.objs.CountTracepoint, nil)
		}),
	)
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Trigger fires the tracepoint n times from the calling thread.
func (s *Set) Trigger(n int) error {
	in := make([]byte, 14)
	for i := 0; i < n; i++ {
		if _, err := s.objs.Trigger.Run(&ebpf.RunOptions{Data: in}); err != nil {
			return fmt.Errorf("triggering counters: %w", err)
		}
	}
	return nil
}

// Programs returns the counting programs by attach type name.
func (s *Set) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"raw_tp":     s.objs.CountRawTp,
		"tp_btf":     s.objs.CountTpBtf,
		"tracepoint": s.objs.CountTracepoint,
	}
}

// TriggerProgram is the socket filter whose test runs fire the tracepoint;
// each test run is also one run of its own.
func (s *Set) TriggerProgram() *ebpf.Program { return s.objs.Trigger }

// Hits returns the per-process hit counters the programs keep themselves.
func (s *Set) Hits() (map[string]uint64, error) {
	out := map[string]uint64{}
	for name, v := range map[string]*ebpf.Variable{
		"raw_tp": s.objs.HitsRawTp, "tp_btf": s.objs.HitsTpBtf, "tracepoint": s.objs.HitsTracepoint,
	} {
		var n uint64
		if err := v.Get(&n); err != nil {
			return nil, fmt.Errorf("reading %s hits: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// Close detaches and unloads everything.
func (s *Set) Close() error {
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
