//go:build linux

package contention

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/ktest"
)

// statsOn is whether run counts accrue (BPF_ENABLE_STATS held by the
// binary, never the sysctl).
var statsOn bool

func TestMain(m *testing.M) { ktest.MainWithStats(m, "contention", &statsOn) }

// Triggers per scenario: same is the number of triggers on the busy CPU
// while the armed thread is inside the program, other those on the other
// CPU at the same time.
const (
	nSame  = 5
	nOther = 3
)

// armedSpec is the contention spec with its programs counting only this
// process.
func armedSpec(t *testing.T) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := loadContention()
	if err != nil {
		t.Fatalf("reading contention spec: %v", err)
	}
	if err := spec.Variables["target_tgid"].Set(uint32(os.Getpid())); err != nil {
		t.Fatalf("arming target_tgid: %v", err)
	}
	return spec
}

func load(t *testing.T, feature string, objs any) {
	t.Helper()
	if err := armedSpec(t).LoadAndAssign(objs, nil); err != nil {
		expect.SkipLoadUnlessExpected(t, feature, fmt.Errorf("loading: %w", err))
	}
}

func attach(t *testing.T, feature string, p *ebpf.Program) {
	t.Helper()
	l, err := link.AttachTracing(link.TracingOptions{Program: p})
	if err != nil {
		expect.SkipUnlessExpected(t, feature, fmt.Errorf("attaching: %w", err))
	}
	t.Cleanup(func() { l.Close() })
}

func stats(t *testing.T, p *ebpf.Program) *ebpf.ProgramStats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatalf("reading program stats: %v", err)
	}
	return s
}

func get[T any](t *testing.T, v *ebpf.Variable) T {
	t.Helper()
	var x T
	if err := v.Get(&x); err != nil {
		t.Fatalf("reading %s: %v", v, err)
	}
	return x
}

func set(t *testing.T, v *ebpf.Variable, x any) {
	t.Helper()
	if err := v.Set(x); err != nil {
		t.Fatalf("setting %s: %v", v, err)
	}
}

// pin locks the goroutine to its thread and the thread to cpu. The caller
// never unlocks: the thread dies with the goroutine, so no pinned or
// real-time thread goes back to the Go scheduler.
func pin(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// onCPU runs fn n times on a fresh thread pinned to cpu.
func onCPU(cpu, n int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		if err := pin(cpu); err != nil {
			errc <- err
			return
		}
		for i := 0; i < n; i++ {
			if err := fn(); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return <-errc
}

func getpgid() error { _, err := unix.Getpgid(0); return err }
func getsid() error  { _, err := unix.Getsid(0); return err }

// scanner is one bpfleet agent across a scenario: a scan before it sets
// the baseline, the scan after reports the scenario's misses as a delta
// and an episode.
type scanner struct {
	a  *agent.Agent
	id uint32
}

func newScanner(t *testing.T, p *ebpf.Program) *scanner {
	t.Helper()
	id := ktest.ProgramID(t, p)
	// The miss watcher is armed on the program from the first scan: each
	// miss of the scenario must be explained as preempted (the guard's
	// holder is switched out, not on the stack of the run turned away).
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways, WatchMisses: true, WatchPrograms: []uint32{id}})
	if err != nil {
		t.Fatalf("starting bpfleet's scanner: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	s := &scanner{a: a, id: id}
	s.scan(t)
	return s
}

// checkCauses holds the scan's miss causes against the scenario's: every
// miss preempted, where the kernel lets the agent watch misses.
func (s *scanner) checkCauses(t *testing.T, snap *agent.Snapshot, p agent.ProgramStat) {
	t.Helper()
	if !snap.MissWatch.Available {
		if expect.Expected(expect.FeatMissWatch) {
			t.Errorf("miss watcher unavailable on %s, where it was measured present: %s", expect.Entry(), snap.MissWatch.Reason)
		} else {
			t.Logf("miss causes not checked: %s", snap.MissWatch.Reason)
		}
		return
	}
	for _, m := range snap.Misses {
		t.Logf("miss on CPU %d (%s, %s) by %s[%d]: %s", m.CPU, m.Cause, m.Context, m.Comm, m.TID, strings.Join(m.Stack, " <- "))
	}
	if c := p.DeltaCauses; c.Preempted != p.Delta.Misses || c.Sum() != p.Delta.Misses {
		t.Errorf("causes %+v of %d misses: want every one preempted", c, p.Delta.Misses)
	}
	if p.Delta.Misses > 0 && (p.MissCauses == nil || p.RecursionMisses == nil || p.MissCauses.Sum() != *p.RecursionMisses) {
		t.Errorf("cumulative causes %v do not add up to recursion_misses %v", p.MissCauses, p.RecursionMisses)
	}
}

func (s *scanner) scan(t *testing.T) (*agent.Snapshot, agent.ProgramStat) {
	t.Helper()
	snap, err := s.a.Scan(context.Background())
	if err != nil {
		t.Fatalf("bpfleet scan: %v", err)
	}
	for _, p := range snap.Programs {
		if p.ID == s.id {
			return snap, *p
		}
	}
	t.Fatalf("bpfleet's scan does not list program %d (%d programs seen)", s.id, len(snap.Programs))
	return nil, agent.ProgramStat{}
}

// check scans after a scenario and holds bpfleet's report against the
// kernel's counter (read around the scan) and the misses the scenario
// made; with misses it must show one recursion_misses episode of the
// contention-possible kind. It returns the snapshot's kernel facts and the
// episode's kind ("" without one).
func (s *scanner) check(t *testing.T, prog *ebpf.Program, misses uint64, wantSleepable bool) (agent.KernelInfo, string) {
	t.Helper()
	before := stats(t, prog)
	snap, p := s.scan(t)
	after := stats(t, prog)
	s.checkCauses(t, snap, p)
	switch {
	case p.RecursionMisses == nil:
		t.Errorf("bpfleet reports no recursion_misses for program %d; the kernel says %d", s.id, after.RecursionMisses)
	case *p.RecursionMisses < before.RecursionMisses || *p.RecursionMisses > after.RecursionMisses:
		t.Errorf("bpfleet reports %d recursion misses for program %d; the kernel says %d", *p.RecursionMisses, s.id, after.RecursionMisses)
	}
	if p.Delta.Misses != misses {
		t.Errorf("bpfleet's scan delta shows %d misses for program %d, the scenario made %d", p.Delta.Misses, s.id, misses)
	}
	switch {
	case p.Sleepable == nil:
		t.Errorf("bpfleet does not know whether program %d is sleepable (want %v)", s.id, wantSleepable)
	case *p.Sleepable != wantSleepable:
		t.Errorf("bpfleet reports program %d sleepable=%v, want %v", s.id, *p.Sleepable, wantSleepable)
	}
	var ep *agent.Episode
	for i := range snap.Episodes {
		e := &snap.Episodes[i]
		if e.ProgID == s.id && e.Source == agent.SourceRecursionMisses {
			ep = e
		}
	}
	kind := ""
	switch {
	case misses == 0 && ep != nil:
		t.Errorf("bpfleet opened a %s episode of %d misses for program %d, which missed nothing", ep.Kind, ep.Misses, s.id)
	case misses > 0 && ep == nil:
		t.Errorf("bpfleet shows no miss episode for program %d after %d misses", s.id, misses)
	case ep != nil:
		kind = ep.Kind
		if ep.Misses != misses {
			t.Errorf("bpfleet's episode counts %d misses for program %d, the scenario made %d", ep.Misses, s.id, misses)
		}
		if ep.Kind != agent.MissKindContentionPossible {
			t.Errorf("bpfleet labels the misses of program %d %q (kernel %s %s), want %q: nothing recursed",
				s.id, ep.Kind, snap.Kernel.Preempt, snap.Kernel.PreemptMode, agent.MissKindContentionPossible)
		}
	}
	t.Logf("bpfleet: program %d attach %q sleepable %v misses %v (delta %d), kernel %s %q (from %s), episode kind %q",
		s.id, p.AttachType, deref(p.Sleepable), deref(p.RecursionMisses), p.Delta.Misses,
		snap.Kernel.Preempt, snap.Kernel.PreemptMode, snap.Kernel.PreemptSource, kind)
	return snap.Kernel, kind
}

func deref[T any](p *T) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// metric logs a number for the harness's metrics table:
// "metric <name>=<value>".
func metric(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("metric %s=%v", name, v)
}

// needCPUs skips where the scenario cannot put a thread on a second CPU.
func needCPUs(t *testing.T) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("reading CPU affinity: %v", err)
	}
	if !set.IsSet(0) || !set.IsSet(1) {
		t.Skipf("needs CPUs 0 and 1 (affinity has %d CPUs)", set.Count())
	}
}
