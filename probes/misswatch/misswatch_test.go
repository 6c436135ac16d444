package misswatch_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/probes/misswatch"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// newWatcher starts a watcher, or ends the test with the kernel's reason
// (a failure where the matrix measured watchpoints present).
func newWatcher(t *testing.T, budget int) (*misswatch.Watcher, int) {
	t.Helper()
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	w, err := misswatch.New(misswatch.Options{CPUs: cpus, Budget: budget})
	if errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(t, expect.FeatMissWatch, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w, cpus
}

// statsAddr finds a program's prog->stats with the bpf_prog iterator.
func statsAddr(t *testing.T, cpus int, id uint32) uint64 {
	t.Helper()
	it, err := progstats.Load(cpus)
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatProgStats, err)
	}
	defer it.Close()
	var addr uint64
	if err := it.ReadEach(func(r *progstats.Record) {
		if r.ID == id {
			addr = r.StatsAddr
		}
	}); err != nil {
		t.Fatal(err)
	}
	if addr == 0 {
		t.Fatalf("the iterator gave no stats address for program %d", id)
	}
	return addr
}

// TestCanaryMissesSampled watches the recursion canary (tp_btf on
// bpf_trace_printk calling it: each trigger is one genuine recursion
// miss): every miss is sampled, its stack holds the canary's own code and
// explains it as recursion in task context.
func TestCanaryMissesSampled(t *testing.T) {
	w, cpus := newWatcher(t, 64)
	c, err := canary.Load()
	if err != nil {
		expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
	}
	defer c.Close()
	id, err := c.ProgramID()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Arm(id, statsAddr(t, cpus, id)); err != nil {
		t.Fatalf("arming the canary: %v", err)
	}
	before, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	if err := c.Trigger(n); err != nil {
		t.Fatal(err)
	}
	after, _ := c.KernelMisses()
	var samples []misswatch.Sample
	drained := w.Drain(func(s misswatch.Sample) { samples = append(samples, s) })
	t.Logf("kernel misses %d, samples %d, drained %+v", after-before, len(samples), drained)
	if after-before != n {
		t.Fatalf("kernel counted %d misses for %d triggers", after-before, n)
	}
	// arm64 under qemu re-traps a write several times (DESIGN: 198
	// samples for 3 misses): counts come from the kernel, causes from the
	// samples. At least one sample per miss everywhere.
	if len(samples) < n {
		t.Fatalf("%d samples for %d misses", len(samples), n)
	}
	syms := misswatch.NewSymbols("/proc/kallsyms")
	ranges, err := misswatch.ProgramRanges(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		if s.ProgID != id || len(s.Stack) == 0 {
			t.Fatalf("sample %+v", s)
		}
		frames := misswatch.Frames(s.Stack, ranges, syms)
		cause, ctx := misswatch.Explain(frames, misswatch.GuardProg, len(ranges) > 0 && !s.Truncated && syms.Err == nil)
		if cause != misswatch.CauseRecursion || ctx != misswatch.ContextTask {
			names := make([]string, len(frames))
			for i, f := range frames {
				names[i] = f.Sym
			}
			t.Errorf("explained as %s in %s, want recursion in task; stack %q", cause, ctx, names)
		}
	}
	t.Logf("samples per miss: %d (arm64 under qemu re-traps a write)", (len(samples)+n-1)/n)
}

// TestBudget: past its budget an event stops sampling until the next
// Drain, and the misses it did not sample are still counted by the kernel.
func TestBudget(t *testing.T) {
	w, cpus := newWatcher(t, 2)
	c, err := canary.Load()
	if err != nil {
		expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
	}
	defer c.Close()
	id, _ := c.ProgramID()
	if err := w.Arm(id, statsAddr(t, cpus, id)); err != nil {
		t.Fatal(err)
	}
	if err := c.Trigger(10); err != nil {
		t.Fatal(err)
	}
	n := 0
	d := w.Drain(func(misswatch.Sample) { n++ })
	// The trigger runs on one CPU at a time (it may migrate): at most
	// the budget per CPU.
	if n == 0 || n > 2*cpus || len(d) != 1 || !d[0].Spent {
		t.Fatalf("10 misses at a budget of 2: %d samples, drained %+v", n, d)
	}
	// The next interval has its budget again.
	if err := c.Trigger(1); err != nil {
		t.Fatal(err)
	}
	n = 0
	w.Drain(func(misswatch.Sample) { n++ })
	if n < 1 {
		t.Fatalf("no sample after the budget was granted again")
	}
}
