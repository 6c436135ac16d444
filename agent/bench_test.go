package agent

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/internal/bpfsys"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// socketFilterSpec is a trivial socket filter, the cheapest program to load.
func socketFilterSpec() *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "MIT",
		Instructions: asm.Instructions{
			asm.LoadImm(asm.R0, 0, asm.DWord),
			asm.Return(),
		},
	}
}

// loadPrograms loads n trivial socket filters so that a scan has n more
// programs to read.
func loadPrograms(tb testing.TB, n int) []*ebpf.Program {
	tb.Helper()
	spec := socketFilterSpec()
	progs := make([]*ebpf.Program, 0, n)
	for i := 0; i < n; i++ {
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			tb.Fatalf("loading program %d of %d: %v", i, n, err)
		}
		progs = append(progs, p)
	}
	tb.Cleanup(func() {
		for _, p := range progs {
			p.Close()
		}
	})
	return progs
}

// rawFloor is the least any tool can do to read every program: the same
// syscalls per program, with no decoding and no caching. Counters alone
// are GET_NEXT_ID, GET_FD_BY_ID, GET_INFO and close (4); a first read, as
// bpftool prog show does it, also asks for map ids and reads the fdinfo
// for memlock (open, read, close: 7).
func rawFloor(first bool) int {
	var info bpfsys.ProgInfo
	maps := make([]uint32, 64)
	buf := make([]byte, 512)
	var id uint32
	n := 0
	for {
		next, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, id)
		if err != nil || !ok {
			return n
		}
		id = next
		fd, err := bpfsys.FDByID(bpfsys.CmdProgGetFDByID, id)
		if err != nil {
			continue
		}
		info = bpfsys.ProgInfo{}
		if first {
			info.NrMapIDs, info.MapIDs = uint32(len(maps)), uint64(uintptr(unsafe.Pointer(&maps[0])))
		}
		bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)))
		if first {
			if f, err := unix.Open("/proc/self/fdinfo/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				unix.Read(f, buf)
				unix.Close(f)
			}
		}
		unix.Close(fd)
		n++
	}
}

// emptyWalk is the least any iterator design can cost: an iter/bpf_prog
// program that writes nothing (mov r0, 0; exit), read to its end. What a
// scan from the iterator costs above it is our BPF program and our Go.
type emptyWalk struct {
	prog *ebpf.Program
	it   *link.Iter
	buf  []byte
}

// newEmptyWalk loads the empty iterator, or returns nil with the kernel's
// reason when it refuses one (then the walk metrics are not reported).
func newEmptyWalk(tb testing.TB) (*emptyWalk, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.Tracing,
		AttachType: ebpf.AttachTraceIter,
		AttachTo:   "bpf_prog",
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("loading the empty bpf_prog iterator: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attaching the empty bpf_prog iterator: %w", err)
	}
	w := &emptyWalk{prog: prog, it: it, buf: make([]byte, 4096)}
	tb.Cleanup(func() { w.it.Close(); w.prog.Close() })
	return w, nil
}

// walk reads the empty iterator once: one read() walks every program.
func (w *emptyWalk) walk(tb testing.TB) {
	rd, err := w.it.Open()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		n, err := rd.Read(w.buf)
		if n == 0 || err != nil {
			break
		}
	}
	rd.Close()
}

// benchAgainstFloor times scan, rawFloor(first) and, where the kernel
// loads one, the empty iterator walk alternately in every iteration, so
// that drift on a shared machine hits all alike, and reports each one's
// ns/prog, the scan's ratio to the floor (x-floor) and to the walk
// (x-walk), the walk's own ratio to the floor (walk-x-floor) and the
// scan's syscalls per program. scan returns how many programs it read.
func benchAgainstFloor(b *testing.B, first bool, scan func() int) {
	var tFloor, tScan, tWalk time.Duration
	var calls uint64
	progs := 0
	w, werr := newEmptyWalk(b)
	if werr != nil {
		b.Logf("no walk metrics: %v", werr)
	}
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		rawFloor(first)
		t1 := time.Now()
		c0 := bpfsys.SyscallCount.Load()
		progs = scan()
		t2 := time.Now()
		calls += bpfsys.SyscallCount.Load() - c0
		if w != nil {
			w.walk(b)
			tWalk += time.Since(t2)
		}
		tScan += t2.Sub(t1)
		tFloor += t1.Sub(t0)
	}
	perProg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(progs) }
	b.ReportMetric(perProg(tFloor), "floor-ns/prog")
	b.ReportMetric(perProg(tScan), "ns/prog")
	b.ReportMetric(float64(tScan)/float64(tFloor), "x-floor")
	if w != nil {
		b.ReportMetric(perProg(tWalk), "walk-ns/prog")
		b.ReportMetric(float64(tWalk)/float64(tFloor), "walk-x-floor")
		b.ReportMetric(float64(tScan)/float64(tWalk), "x-walk")
	}
	b.ReportMetric(float64(calls)/float64(b.N)/float64(progs), "syscalls/prog")
}

// BenchmarkScan compares a steady-state agent scan over 1,000 extra
// programs with the raw-syscall floor (4 per program) in the same loop;
// walks/scan is the share of scans that walked every program (the rest
// read the stats table: agent/scan_steady.go).
func BenchmarkScan(b *testing.B) { benchScan(b, true) }

// BenchmarkScanWalk is BenchmarkScan with the steady read off: every scan
// walks every program, as before the stats table (the same run's
// baseline).
func BenchmarkScanWalk(b *testing.B) { benchScan(b, false) }

func benchScan(b *testing.B, steady bool) {
	loadPrograms(b, 1000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if !steady {
		noSteady(a.r)
	}
	ctx := context.Background()
	for range 2 { // warm the static cache; drain the agent's own loads
		if _, err := a.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
	walks := 0
	benchAgainstFloor(b, false, func() int {
		s, err := a.Scan(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.Scan.Walk {
			walks++
		}
		return len(s.Programs)
	})
	b.ReportMetric(float64(walks)/float64(b.N), "walks/scan")
}

// noSteady turns the reader's steady read off: every read walks.
func noSteady(r *reader) {
	r.steady.close()
	r.steady.tried, r.steady.off = true, "off for this benchmark"
}

// TestScanMemoryFlat runs 10,000 scans and checks the live heap does not
// grow between the first thousand and the last: caches must evict and
// snapshots must not pile up.
func TestScanMemoryFlat(t *testing.T) {
	a, err := New(Config{StatsMode: StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, _ := canarytest.Load(t)
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var base uint64
	for i := 1; i <= 10000; i++ {
		if i%100 == 0 {
			c.Trigger(1) // keep an episode open and growing
		}
		if _, err := a.Scan(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 1000 {
			base = heap()
		}
	}
	end := heap()
	t.Logf("live heap after 1,000 scans %d B, after 10,000 scans %d B", base, end)
	if end > base+512<<10 {
		t.Errorf("live heap grew from %d to %d bytes over 9,000 scans", base, end)
	}
}

// BenchmarkFirstScan compares a first read of 1,000 extra programs (every
// field, memlock included: what `bpfleet list` does) with bpftool's
// sequence of syscalls for the same (7 per program), in the same loop.
func BenchmarkFirstScan(b *testing.B) {
	loadPrograms(b, 1000)
	for _, parallel := range []int{1, runtime.NumCPU()} {
		b.Run(fmt.Sprintf("parallel-%d", parallel), func(b *testing.B) {
			benchAgainstFloor(b, true, func() int {
				r := newReader()
				r.parallel = parallel
				p, _, err := r.read(time.Now())
				if err != nil {
					b.Fatal(err)
				}
				r.fdinfo.Close()
				return len(p)
			})
		})
	}
}

// BenchmarkOneShot is what `bpfleet list --no-owners` costs in-process
// over 1,000 extra programs: New, one scan, Close, from the iterator
// (CO-RE cache warm) and from syscalls (parallel as list runs it),
// alternated in every iteration; x-syscall is the iterator's share.
func BenchmarkOneShot(b *testing.B) {
	loadPrograms(b, 1000)
	ctx := context.Background()
	once := func(cfg Config) (time.Duration, string) {
		t0 := time.Now()
		a, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		s, err := a.Scan(ctx)
		if err != nil {
			b.Fatal(err)
		}
		a.Close()
		return time.Since(t0), s.Scan.Source
	}
	if _, src := once(Config{}); src != ScanSourceIterator { // warms the CO-RE cache
		b.Skipf("scan source is %s on this kernel", src)
	}
	var tIter, tSys time.Duration
	for b.Loop() {
		d, _ := once(Config{Parallel: runtime.NumCPU()})
		tIter += d
		d, _ = once(Config{NoIterator: true, Parallel: runtime.NumCPU()})
		tSys += d
	}
	b.ReportMetric(float64(tIter.Microseconds())/float64(b.N), "iter-µs")
	b.ReportMetric(float64(tSys.Microseconds())/float64(b.N), "syscall-µs")
	b.ReportMetric(float64(tIter)/float64(tSys), "x-syscall")
}

// BenchmarkIterRead is the scan source alone (reader.read: the iterator
// read, the join with links and cached static fields), without the
// snapshot Agent.Scan builds, against the 4-syscall floor: every read
// walks (the steady read off).
func BenchmarkIterRead(b *testing.B) { benchRead(b, false) }

// BenchmarkSteadyRead is BenchmarkIterRead with the steady read on: while
// nothing is loaded or unloaded, the watcher's two drains and one stats
// table run instead of the walk (walks/read says how many still walked).
func BenchmarkSteadyRead(b *testing.B) { benchRead(b, true) }

func benchRead(b *testing.B, steady bool) {
	loadPrograms(b, 1000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if a.r.iter == nil {
		b.Skipf("scan source is syscall on this kernel: %s", a.r.fallback)
	}
	if !steady {
		noSteady(a.r)
	}
	for range 2 {
		if _, _, err := a.r.read(time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	if steady && a.r.steady.w == nil {
		b.Skipf("no steady read on this kernel: %s", a.r.steady.off)
	}
	walks := 0
	benchAgainstFloor(b, false, func() int {
		p, st, err := a.r.read(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if st.Walk {
			walks++
		}
		return len(p)
	})
	b.ReportMetric(float64(walks)/float64(b.N), "walks/read")
}
