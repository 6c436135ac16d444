package reader

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/bpfevents"
	"github.com/bpfleet/bpfleet/probes/statstable"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// steadyReader is a reader with the iterator source, or a skip
// with the reason this kernel gives.
func steadyReader(t *testing.T) *Reader {
	t.Helper()
	a := New(Options{})
	t.Cleanup(func() { a.Close() })
	if a.iter == nil {
		t.Skipf("scan source is syscall on this kernel: %s", a.fallback)
	}
	return a
}

// readSteady reads once and returns the programs by id and the stats.
func readSteady(t *testing.T, a *Reader) (map[uint32]Program, ScanStats) {
	t.Helper()
	progs, st, err := a.read(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	byID := make(map[uint32]Program, len(progs))
	for _, p := range progs {
		if _, dup := byID[p.ID]; dup {
			t.Fatalf("prog %d twice in one read", p.ID)
		}
		byID[p.ID] = p
	}
	return byID, st
}

// settle reads until a read does not walk: other tests' and the reader's
// own loads are drained by then. It skips where the node has no steady
// read.
func settle(t *testing.T, a *Reader) (map[uint32]Program, ScanStats) {
	t.Helper()
	for range 50 {
		progs, st := readSteady(t, a)
		if a.steady.w == nil {
			t.Skipf("no steady read on this kernel: %s", st.WalkReason)
		}
		if !st.Walk {
			return progs, st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("50 reads, every one walked (is something loading programs all the time?)")
	return nil, ScanStats{}
}

func socketFilter(t *testing.T) (*ebpf.Program, uint32) {
	t.Helper()
	p, err := ebpf.NewProgram(scantest.SocketFilterSpec())
	if err != nil {
		t.Fatal(err)
	}
	return p, scantest.ProgID(t, p)
}

// TestSteadyReadLoadUnload: a program loaded between two reads appears in
// the next one (which walks), one closed is gone from the next one (never
// reported with a stale counter), and reads with nothing loaded or
// unloaded do not walk.
func TestSteadyReadLoadUnload(t *testing.T) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Skipf("BPF_ENABLE_STATS refused: %v", err)
	}
	defer stats.Close()
	a := steadyReader(t)
	settle(t, a)
	p, id := socketFilter(t)
	progs, st := readSteady(t, a)
	if !st.Walk || st.WalkReason != walkChanged {
		t.Errorf("read after a load: walk %v (%q), want a walk for %q", st.Walk, st.WalkReason, walkChanged)
	}
	if _, ok := progs[id]; !ok {
		t.Fatalf("prog %d loaded before the read is missing", id)
	}
	progs, _ = settle(t, a)
	if _, ok := progs[id]; !ok {
		t.Fatalf("prog %d missing from a steady read", id)
	}
	for range 4 {
		if _, _, err := p.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, a) // a first Test may load cilium/ebpf's feature probe
	progs, st = readSteady(t, a)
	if st.Walk {
		t.Logf("read walked (%s): something else loaded a program", st.WalkReason)
	}
	if n := progs[id].RunCount; n != 4 {
		t.Errorf("prog %d ran 4 times, the read says %d (walk %v)", id, n, st.Walk)
	}
	p.Close()
	progs, st = readSteady(t, a)
	if _, ok := progs[id]; ok {
		t.Errorf("prog %d closed before the read is still reported (walk %v %q)", id, st.Walk, st.WalkReason)
	}
	if !st.Walk {
		t.Errorf("the read after an unload did not walk")
	}
}

// TestSteadyReadEqualsObjInfo: after several reads without a walk, every
// idle program's counters equal BPF_OBJ_GET_INFO_BY_FD's, the canary's
// genuine recursion misses included.
func TestSteadyReadEqualsObjInfo(t *testing.T) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err == nil {
		defer stats.Close()
	}
	a := steadyReader(t)
	c, canaryID := canarytest.Load(t)
	settle(t, a)
	var progs map[uint32]Program
	for range 5 {
		if err := c.Trigger(2); err != nil {
			t.Fatal(err)
		}
		var st ScanStats
		progs, st = readSteady(t, a)
		if st.Walk {
			t.Logf("a read walked: %s", st.WalkReason)
		}
	}
	// The read compared must not have walked: read until one does not
	// (another process's loads make a read walk), failing as settle does.
	again, _ := settle(t, a)
	compared := 0
	for id, p := range progs {
		q, ok := again[id]
		if !ok || q.RunCount != p.RunCount || q.RunTimeNs != p.RunTimeNs || q.RecursionMisses == nil || p.RecursionMisses == nil || *q.RecursionMisses != *p.RecursionMisses {
			continue
		}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			continue
		}
		ref, err := prog.Stats()
		prog.Close()
		if err != nil {
			t.Fatal(err)
		}
		if q.RunCount != ref.RunCount || q.RunTimeNs != uint64(ref.Runtime) || *q.RecursionMisses != ref.RecursionMisses {
			if ref.RunCount != q.RunCount && id != canaryID {
				continue // ran since the reads
			}
			t.Errorf("prog %d %s: read runs %d time %d misses %d, obj info %d %d %d", id, q.Name, q.RunCount, q.RunTimeNs, *q.RecursionMisses, ref.RunCount, uint64(ref.Runtime), ref.RecursionMisses)
		}
		compared++
	}
	if q := again[canaryID]; q.RecursionMisses == nil || *q.RecursionMisses == 0 {
		t.Errorf("the canary shows no recursion misses after 10 triggers in steady reads")
	}
	t.Logf("%d programs compared", compared)
}

// TestSteadyReadLost: a watcher whose ring overflowed (more loads and
// unloads on one CPU than it holds) makes the next read walk.
func TestSteadyReadLost(t *testing.T) {
	a := steadyReader(t)
	settle(t, a)
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var old, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			t.Fatal(err)
		}
		defer unix.SchedSetaffinity(0, &old)
		one.Set(0)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Skipf("cannot pin to CPU 0: %v", err)
		}
		for range 1500 { // 3,000 records of 24 bytes: more than a 32 KiB ring
			p, _ := socketFilter(t)
			p.Close()
		}
	}()
	_, st := readSteady(t, a)
	if !st.Walk || st.WalkReason != walkLost {
		t.Errorf("read after an overflow: walk %v (%q), want a walk for %q", st.Walk, st.WalkReason, walkLost)
	}
	// The kernel's LOST record comes with the next record: that read
	// walks too, and then the reads settle.
	p, _ := socketFilter(t)
	p.Close()
	if _, st := readSteady(t, a); !st.Walk {
		t.Error("the read after the LOST record did not walk")
	}
	settle(t, a)
}

// TestSteadyReadChurn reads while other goroutines load and close programs:
// no read fails, none reports a program closed before the read began, and
// every program open across a read is in it.
func TestSteadyReadChurn(t *testing.T) {
	a := steadyReader(t)
	settle(t, a)
	stable, stableID := socketFilter(t)
	defer stable.Close()
	var closed sync.Map // id → time closed
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				p, id := socketFilter(t)
				time.Sleep(time.Duration(id%200) * time.Microsecond)
				p.Close()
				closed.Store(id, time.Now())
			}
		})
	}
	walks, reads := 0, 0
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		progs, st := readSteady(t, a)
		reads++
		if st.Walk {
			walks++
		}
		if _, ok := progs[stableID]; !ok {
			t.Fatalf("prog %d, open throughout, missing from a read", stableID)
		}
		for id := range progs {
			if at, ok := closed.Load(id); ok && at.(time.Time).Before(start) {
				t.Fatalf("prog %d closed at %v is in a read begun at %v (walk %v)", id, at, start, st.Walk)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads under churn, %d walked", reads, walks)
	settle(t, a)
}

// TestSteadyReadGrowsTable: a table too small for the programs is
// reloaded bigger, and the steady read goes on.
func TestSteadyReadGrowsTable(t *testing.T) {
	a := New(Options{})
	defer a.Close()
	if a.iter == nil {
		t.Skipf("scan source is syscall on this kernel: %s", a.fallback)
	}
	a.steady.load = func(cpus, _ int) (*bpfevents.Watcher, *statstable.Table, error) {
		tab, err := statstable.Load(cpus, 4)
		if err != nil {
			return nil, nil, err
		}
		w, err := bpfevents.Open(cpus)
		if err != nil {
			tab.Close()
			return nil, nil, err
		}
		return w, tab, nil
	}
	for range 8 {
		p, _ := socketFilter(t)
		defer p.Close()
	}
	progs, _ := settle(t, a)
	if len(progs) <= 4 {
		t.Fatalf("%d programs: not more than the table's 4 slots", len(progs))
	}
	if c := a.steady.tab.Cap(); c < len(progs) {
		t.Fatalf("table of %d slots for %d programs", c, len(progs))
	}
}
