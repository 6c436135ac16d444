package ktest

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/explain"
)

// The miss watcher's cost, each figure against its twin in the same run:
// an agent watching a program that does not miss against one that does
// not watch, and a program run with its counter watched against the same
// runs unwatched; then a miss storm on every CPU, with and without the
// watcher. Figures go to the matrix table (metric lines); what the tests
// hold is exact (no miss, no sample; samples within the budget; causes
// adding up), never a time, which qemu's TCG and a shared CI machine make
// noise of. Under TCG a watchpoint is emulated by sending every access to
// the watched page down qemu's slow path, so the program figures here are
// the emulator's cost, an upper bound; a CPU's debug registers compare
// addresses in hardware.

// watchedDeletes attaches the recursion scenario's fentry program to
// htab_map_delete_elem and returns it with its maps: deletes from the outer
// map run it without a miss, each delete from the inner map is one miss.
func watchedDeletes(t *testing.T) (id uint32, objs *deleteObjs, prog *ebpf.Program) {
	t.Helper()
	// Its inner deletes recurse: without the guard until the kernel stack
	// overflows (5.10), so not there.
	if err := canary.RecursionGuard(); err != nil {
		expect.SkipUnlessExpected(t, expect.FeatRecursionGuard, err)
	}
	var o struct {
		deleteObjs
		Prog *ebpf.Program `ebpf:"fentry_delete"`
	}
	load(t, expect.FeatFentry, &o)
	closeAll(t, o.Prog, o.Outer, o.Inner)
	l, err := link.AttachTracing(link.TracingOptions{Program: o.Prog})
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatFentry, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	return ProgramID(t, o.Prog), &o.deleteObjs, o.Prog
}

// watchingAgent starts an agent that watches program id from its first
// scan (explain.Watching), and fails unless it does.
func watchingAgent(t *testing.T, id uint32) *agent.Agent {
	t.Helper()
	a, s := explain.Watching(t, id)
	if !slices.ContainsFunc(s.MissWatch.Watched, func(w agent.WatchedProgram) bool { return w.ProgID == id }) {
		a.Close()
		t.Fatalf("program %d not watched after the first scan: %+v", id, s.MissWatch)
	}
	return a
}

// measure logs a timing or a ratio of timings for the matrix table,
// shown beside the metrics but never held equal across kernels.
func measure(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("measure %s=%v", name, v)
}

// processCPU is the CPU time the test process has used, user and system.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median[T cmp.Ordered](d []T) T {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// deleteN deletes key 0 (absent) from m n times, the way deleteTwice does.
func deleteN(t *testing.T, m *ebpf.Map, n int) {
	t.Helper()
	for range n {
		if err := m.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("deleting from %v: %v", m, err)
		}
	}
}

// TestWatchCostIdle: no miss, no cost. Three agents scan in turn, the
// order rotating so that drift and the program's fresh runs hit each
// alike: one without the watcher, one with it by default (nothing named)
// and armed on a canary because it missed before the agent started (the
// watcher keeps such a program armed: a watchpoint costs nothing until a
// miss writes the counter), one watching a named program that runs
// without missing. Then the program's runs with its counter watched
// against the same runs once the watch is gone.
func TestWatchCostIdle(t *testing.T) {
	id, objs, prog := watchedDeletes(t)
	cs, cids := canaries(t, 1)
	if err := cs[0].Trigger(1); err != nil {
		t.Fatal(err)
	}
	cid := cids[0]
	start := func(cfg agent.Config) *agent.Agent {
		a, err := agent.New(cfg)
		if err != nil {
			t.Fatalf("starting the agent: %v", err)
		}
		explain.Scan(t, a)
		return a
	}
	off := start(agent.Config{})
	defer off.Close()
	idle := start(agent.Config{WatchMisses: true})
	defer idle.Close()
	on := watchingAgent(t, id)
	defer func() { on.Close() }()
	m0 := stats(t, prog).RecursionMisses

	const rounds, deletes = 45, 200
	agents := []*agent.Agent{off, idle, on}
	scanCPU := make([][]time.Duration, len(agents))
	scanBytes := make([][]uint64, len(agents))
	var offRun, onRun, offNs, onNs []time.Duration
	// timeRuns is the wall time per delete of the outer map, each running
	// the program once, and the kernel's run time per run where stats
	// are on: what a watched counter adds to a run.
	timeRuns := func(wall, ns *[]time.Duration) {
		s0 := stats(t, prog)
		start := time.Now()
		deleteN(t, objs.Outer, deletes)
		*wall = append(*wall, time.Since(start)/deletes)
		if s1 := stats(t, prog); statsOn && s1.RunCount > s0.RunCount {
			*ns = append(*ns, (s1.Runtime-s0.Runtime)/time.Duration(s1.RunCount-s0.RunCount))
		}
	}
	var last, lastIdle *agent.Snapshot
	for i := range rounds {
		// The program runs before each round, so every scan has news.
		deleteN(t, objs.Outer, deletes)
		for k := range agents {
			j := (i + k) % len(agents)
			// Each scan starts on a collected heap, so that no agent's
			// scan pays for another's garbage.
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			c := processCPU(t)
			s := explain.Scan(t, agents[j])
			scanCPU[j] = append(scanCPU[j], processCPU(t)-c)
			runtime.ReadMemStats(&m1)
			scanBytes[j] = append(scanBytes[j], m1.TotalAlloc-m0.TotalAlloc)
			switch agents[j] {
			case on:
				last = s
			case idle:
				lastIdle = s
			}
		}
	}
	if last.MissWatch.Samples != 0 || len(last.Misses) != 0 {
		t.Errorf("the watcher sampled %d misses of a program that did not miss", last.MissWatch.Samples)
	}
	if w := slotOf(lastIdle, cid); w == nil || w.Why != "missed-before" || lastIdle.MissWatch.Samples != 0 {
		t.Errorf("the default watcher holds canary %d as %+v, want it armed as missed-before and no sample: %+v", cid, w, lastIdle.MissWatch)
	}
	// The program's runs, rounds with its counter watched alternating
	// with rounds unwatched (NameWatched(nil): the next scan disarms it, as it never missed).
	for i := range 2 * rounds {
		watch := i%2 == 0
		if watch {
			on.NameWatched([]uint32{id})
		} else {
			on.NameWatched(nil)
		}
		s := explain.Scan(t, on)
		if armed := slices.ContainsFunc(s.MissWatch.Watched, func(w agent.WatchedProgram) bool { return w.ProgID == id }); armed != watch {
			t.Fatalf("program %d watched %v, want %v: %+v", id, armed, watch, s.MissWatch)
		}
		if watch {
			timeRuns(&onRun, &onNs)
		} else {
			timeRuns(&offRun, &offNs)
		}
	}
	if m := stats(t, prog).RecursionMisses - m0; m != 0 {
		t.Fatalf("the program missed %d times; the idle twin needs none", m)
	}
	base := median(scanCPU[0])
	t.Logf("agent CPU per scan (median of %d): no watcher %v, default watcher armed on a program that missed before %v, watching a named quiet program %v",
		rounds, base, median(scanCPU[1]), median(scanCPU[2]))
	t.Logf("bytes allocated per scan (median): no watcher %d, default watcher armed on a program that missed before %d, watching a named quiet program %d",
		median(scanBytes[0]), median(scanBytes[1]), median(scanBytes[2]))
	// Allocation is the one figure here that timing noise does not
	// move: a watcher armed on quiet programs allocates only their
	// entries in the snapshot's list (the named agent holds the canary
	// too: a free slot goes to a program that missed before).
	none, before, watching := median(scanBytes[0]), median(scanBytes[1]), median(scanBytes[2])
	if nb, nw := uint64(len(lastIdle.MissWatch.Watched)), uint64(len(last.MissWatch.Watched)); before > none+1024*nb || watching > none+1024*nw {
		t.Errorf("bytes allocated per scan: no watcher %d, default watcher armed on %d program(s) that missed before %d, watching %d program(s) %d (want at most +1024 per program armed)",
			none, nb, before, nw, watching)
	}
	t.Logf("delete with the program's counter watched %v, unwatched %v", median(onRun), median(offRun))
	measure(t, "watchcost.idle.scan_cpu_missed_before_over_none", ratio(median(scanCPU[1]), base))
	measure(t, "watchcost.idle.scan_cpu_watching_over_none", ratio(median(scanCPU[2]), base))
	measure(t, "watchcost.idle.delete_watched_over_unwatched", ratio(median(onRun), median(offRun)))
	if len(onNs) > 0 && len(offNs) > 0 {
		t.Logf("the program's own run time (kernel stats, median): watched %v, unwatched %v", median(onNs), median(offNs))
		measure(t, "watchcost.idle.run_ns_watched_over_unwatched", ratio(median(onNs), median(offNs)))
	}
}

// TestWatchStorm: every CPU misses as fast as deletes go, with the
// watcher on and then off. The kernel turns each watchpoint off past its
// budget, so one interval takes at most budget samples per CPU however
// many misses there were; the rest are unexplained and counted, and the
// causes add up to the kernel's count. The storm's own rate with and
// without the watcher is what the watcher costs the program that storms.
func TestWatchStorm(t *testing.T) {
	id, objs, _ := watchedDeletes(t)
	on := watchingAgent(t, id)
	defer func() { on.Close() }()
	const window = time.Second
	cpus := runtime.NumCPU()
	// storm deletes from the inner map on every CPU for the window and
	// returns the deletes made, each one miss.
	storm := func() uint64 {
		var wg sync.WaitGroup
		counts := make([]uint64, cpus)
		deadline := time.Now().Add(window)
		for c := range cpus {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var set unix.CPUSet
				set.Set(c)
				if err := unix.SchedSetaffinity(0, &set); err != nil {
					t.Errorf("pinning to CPU %d: %v", c, err)
					return
				}
				for time.Now().Before(deadline) {
					for range 64 {
						if err := objs.Inner.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
							t.Errorf("deleting: %v", err)
							return
						}
					}
					counts[c] += 64
				}
			}()
		}
		wg.Wait()
		var n uint64
		for _, c := range counts {
			n += c
		}
		return n
	}
	idle := processCPU(t)
	explain.Scan(t, on)
	idle = processCPU(t) - idle

	// watched storms with the watcher on and checks the scan after it;
	// it returns the storm's misses and the scan's CPU time.
	watched := func(round string) (uint64, time.Duration) {
		deletes := storm()
		c := processCPU(t)
		s := explain.Scan(t, on)
		cpu := processCPU(t) - c
		var p *agent.ProgramStat
		for _, q := range s.Programs {
			if q.ID == id {
				p = q
			}
		}
		if p == nil {
			t.Fatalf("program %d not in the scan", id)
		}
		sampled := uint64(0)
		for _, m := range s.Misses {
			if m.ProgID == id {
				sampled++
				if m.Cause != agent.CauseRecursion {
					t.Errorf("a storm miss explained as %s, want recursion", m.Cause)
				}
			}
		}
		budget := uint64(s.MissWatch.Budget * cpus)
		t.Logf("%s storm with the watcher: %d deletes in %v on %d CPUs, %d misses counted, %d sampled (budget %d), causes %+v, over budget %d so far; the scan after it took %v of CPU",
			round, deletes, window, cpus, p.Delta.Misses, sampled, budget, p.DeltaCauses, s.MissWatch.OverBudget, cpu)
		if p.Delta.Misses != deletes {
			t.Errorf("kernel counted %d misses for %d recursing deletes", p.Delta.Misses, deletes)
		}
		if sampled == 0 || sampled > budget {
			t.Errorf("%d samples in one interval, want 1 to the budget, %d (%d per CPU)", sampled, budget, s.MissWatch.Budget)
		}
		if p.DeltaCauses.Sum() != p.Delta.Misses || p.DeltaCauses.Recursion != sampled || p.DeltaCauses.Unexplained != p.Delta.Misses-sampled {
			t.Errorf("causes %+v of %d misses, %d sampled: want %d recursion and the rest unexplained", p.DeltaCauses, p.Delta.Misses, sampled, sampled)
		}
		return deletes, cpu
	}
	// The first storm's scan names the stacks' addresses (one pass over
	// kallsyms); the second finds them named.
	_, firstScan := watched("first")
	watchedDeletes, secondScan := watched("second")
	on.Close()
	plainDeletes := storm()
	c := processCPU(t)
	if _, err := os.ReadFile("/proc/kallsyms"); err != nil {
		t.Fatal(err)
	}
	t.Logf("storm without the watcher: %d deletes in %v; agent CPU for an idle scan %v; one read of /proc/kallsyms %v",
		plainDeletes, window, idle, processCPU(t)-c)
	measure(t, "watchcost.storm.misses_per_s_watched_over_unwatched", fmt.Sprintf("%.2f", float64(watchedDeletes)/float64(plainDeletes)))
	measure(t, "watchcost.storm.scan_cpu_first_over_idle", ratio(firstScan, idle))
	measure(t, "watchcost.storm.scan_cpu_second_over_idle", ratio(secondScan, idle))
}
