package agent

import (
	"context"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
)

// BenchmarkScanGo is BenchmarkScan's steady-state scan of 1,000 extra idle
// programs with the iterators' reads timed apart: go-ns/prog is what the
// Go side costs per program (the scan minus the kernel's reads), the part
// that does not shrink when the kernel read does. Every scan walks (the
// steady read off: its table read is not timed apart); what the Go side
// does with a walk's records and with the table's is the same merge.
func BenchmarkScanGo(b *testing.B) {
	scantest.LoadPrograms(b, 1000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	a.r.WalkAlways("off for this benchmark")
	ctx := context.Background()
	if _, err := a.Scan(ctx); err != nil {
		b.Fatal(err)
	}
	if src, why := a.r.Source(); src != ScanSourceIterator {
		b.Skipf("scan source is syscall on this kernel: %s", why)
	}
	var kernel time.Duration
	a.r.TimeIterators(&kernel)
	var total time.Duration
	progs := 0
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		s, err := a.Scan(ctx)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		progs = len(s.Programs)
	}
	perProg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(progs) }
	b.ReportMetric(perProg(total), "ns/prog")
	b.ReportMetric(perProg(kernel), "kernel-ns/prog")
	b.ReportMetric(perProg(total-kernel), "go-ns/prog")
}
