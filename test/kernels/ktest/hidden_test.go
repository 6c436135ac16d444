package ktest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/probes/misswatch"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/explain"
)

// TestRecursionHiddenAddresses: where the kernel hides its addresses from
// the agent (kptr_restrict=2 hides them from everyone, root included; with
// perf_event_paranoid >= 2 a process without CAP_SYSLOG sees them hidden
// too), kallsyms and jited_ksyms read as zeros, yet a self-recursing
// fentry or tp_btf program's misses must still read recursion: its JIT
// ranges come from the bpf_prog iterator. The watcher's state must say
// what named the frames. Before the iterator, all 12 such misses in the
// 7.2 guest read preempted.
func TestRecursionHiddenAddresses(t *testing.T) {
	if expect.Entry() == "" {
		t.Skipf("would hide this host's kernel addresses from every process (kptr_restrict, perf_event_paranoid): runs in the kernel matrix's VMs (%s unset)", expect.EntryEnv)
	}
	// Both ways of hiding take the same path through the agent (zeros in
	// kallsyms and jited_ksyms), so the second runs one program type only:
	// each subtest is an agent's start and two scans (5-15 s under TCG).
	for _, hide := range []struct {
		name  string
		on    func(t *testing.T)
		tpBtf bool
	}{
		{"kptr_restrict=2", func(t *testing.T) { sysctl(t, "kernel/kptr_restrict", "2") }, true},
		{"no CAP_SYSLOG", func(t *testing.T) {
			// Below 2, kallsyms shows addresses to anyone (for perf).
			if v, err := strconv.Atoi(readSysctl(t, "kernel/perf_event_paranoid")); err != nil || v < 2 {
				sysctl(t, "kernel/perf_event_paranoid", "2")
			}
			dropSyslog(t)
		}, false},
	} {
		t.Run(hide.name, func(t *testing.T) {
			// The watcher's symbols field (hiddenRecursion) says whether
			// kallsyms went to zeros.
			hide.on(t)
			t.Run("fentry", func(t *testing.T) {
				var objs struct {
					deleteObjs
					Prog *ebpf.Program `ebpf:"fentry_delete"`
				}
				load(t, expect.FeatFentry, &objs)
				closeAll(t, objs.Prog, objs.Outer, objs.Inner)
				l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
				if err != nil {
					expect.SkipUnlessExpected(t, expect.FeatFentry, fmt.Errorf("attaching: %w", err))
				}
				closeAll(t, l)
				hiddenRecursion(t, ProgramID(t, objs.Prog), 2, func() { deleteTwice(t, objs.Inner) })
			})
			if !hide.tpBtf {
				return
			}
			t.Run("tp_btf", func(t *testing.T) {
				c, err := canary.Load()
				if err != nil {
					expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
				}
				closeAll(t, c)
				id, err := c.ProgramID()
				if err != nil {
					t.Fatal(err)
				}
				hiddenRecursion(t, id, 3, func() {
					if err := c.Trigger(3); err != nil {
						t.Fatal(err)
					}
				})
			})
		})
	}
}

// hiddenRecursion checks that the n misses trigger makes of program id are
// all explained as recursion with frames named by program ranges only.
func hiddenRecursion(t *testing.T, id uint32, n uint64, trigger func()) {
	t.Helper()
	snap, p := explain.Observe(t, id, trigger)
	w := snap.MissWatch
	if w.Symbols != misswatch.SymbolsRangesOnly || w.Unseen != "" {
		t.Errorf("watcher says symbols %q (unseen %q), want %q", w.Symbols, w.Unseen, misswatch.SymbolsRangesOnly)
	}
	for _, wp := range w.Watched {
		if wp.ProgID == id && wp.Ranges != misswatch.RangesIterator {
			t.Errorf("program %d's ranges from %q, want the iterator's", id, wp.Ranges)
		}
	}
	if p.Delta.Misses != n {
		t.Fatalf("kernel counted %d misses, the scenario makes %d", p.Delta.Misses, n)
	}
	if c := p.DeltaCauses; c.Recursion != n || c.Sum() != n {
		t.Errorf("causes %+v of %d misses with kernel addresses hidden: want all recursion", c, n)
	}
	for _, s := range snap.Misses {
		if s.ProgID == id && s.Cause != agent.CauseRecursion {
			t.Errorf("a miss explained as %s in %s: %q", s.Cause, s.Context, s.Stack)
		}
	}
}

func readSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sysctl sets a sysctl for the rest of the test.
func sysctl(t *testing.T, name, v string) {
	t.Helper()
	old := readSysctl(t, name)
	if err := os.WriteFile("/proc/sys/"+name, []byte(v), 0); err != nil {
		t.Fatalf("setting %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile("/proc/sys/"+name, []byte(old), 0); err != nil {
			t.Errorf("restoring %s: %v", name, err)
		}
	})
}

// dropSyslog takes CAP_SYSLOG out of every thread's effective set for the
// rest of the test (it stays permitted, so it is put back after).
func dropSyslog(t *testing.T) {
	t.Helper()
	set := func(on bool) error {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capget: %w", err)
		}
		bit := uint32(1) << (unix.CAP_SYSLOG - 32)
		if on {
			data[1].Effective |= bit
		} else {
			data[1].Effective &^= bit
		}
		// Every thread: the agent's goroutines read kallsyms and open
		// programs from whichever thread runs them.
		_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
		runtime.KeepAlive(&hdr)
		runtime.KeepAlive(&data)
		if errno != 0 {
			return fmt.Errorf("capset: %w", errno)
		}
		return nil
	}
	if err := set(false); err != nil {
		if errors.Is(err, syscall.ENOTSUP) {
			t.Skipf("cannot drop CAP_SYSLOG from every thread: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(true); err != nil {
			t.Errorf("restoring CAP_SYSLOG: %v", err)
		}
	})
}
