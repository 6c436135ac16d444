package agent

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// BenchmarkScan compares a steady-state agent scan over 1,000 extra
// programs with the raw-syscall floor (4 per program) in the same loop;
// walks/scan is the share of scans that walked every program (the rest
// read the stats table: agent/internal/reader/scan_steady.go).
func BenchmarkScan(b *testing.B) { benchScan(b, true) }

// BenchmarkScanWalk is BenchmarkScan with the steady read off: every scan
// walks every program, as before the stats table (the same run's
// baseline).
func BenchmarkScanWalk(b *testing.B) { benchScan(b, false) }

func benchScan(b *testing.B, steady bool) {
	scantest.LoadPrograms(b, 1000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if !steady {
		a.r.WalkAlways("off for this benchmark")
	}
	ctx := context.Background()
	for range 2 { // warm the static cache; drain the agent's own loads
		if _, err := a.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
	walks := 0
	scantest.BenchAgainstFloor(b, false, func() int {
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

// BenchmarkOneShot is what `bpfleet list --no-owners` costs in-process
// over 1,000 extra programs: New, one scan, Close, from the iterator
// (CO-RE cache warm) and from syscalls (parallel as list runs it),
// alternated in every iteration; x-syscall is the iterator's share.
func BenchmarkOneShot(b *testing.B) {
	scantest.LoadPrograms(b, 1000)
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
