package agent

import (
	"context"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/linkstats"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// timedStats and timedLinks time the iterators' reads and the map update
// before each (the kernel's part of a scan) so that BenchmarkScanGo can
// tell the Go side apart.
type timedStats struct {
	statsIter
	d *time.Duration
}

func (t timedStats) SetKnownMaxID(id uint32) error {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.statsIter.SetKnownMaxID(id)
}

func (t timedStats) ReadStats(stats []progstats.Stat, whole []progstats.Record) ([]progstats.Stat, []progstats.Record, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.statsIter.ReadStats(stats, whole)
}

type timedLinks struct {
	linkIter
	d *time.Duration
}

func (t timedLinks) SetKnownMaxID(id uint32) error {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.linkIter.SetKnownMaxID(id)
}

func (t timedLinks) Read(dst []linkstats.Record) ([]linkstats.Record, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.linkIter.Read(dst)
}

// BenchmarkScanGo is BenchmarkScan's steady-state scan of 1,000 extra idle
// programs with the iterators' reads timed apart: go-ns/prog is what the
// Go side costs per program (the scan minus the kernel's reads), the part
// that does not shrink when the kernel read does. Every scan walks (the
// steady read off: its table read is not timed apart); what the Go side
// does with a walk's records and with the table's is the same merge.
func BenchmarkScanGo(b *testing.B) {
	loadPrograms(b, 1000)
	a, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	noSteady(a.r)
	ctx := context.Background()
	if _, err := a.Scan(ctx); err != nil {
		b.Fatal(err)
	}
	if a.r.iter == nil {
		b.Skipf("scan source is syscall on this kernel: %s", a.r.fallback)
	}
	var kernel time.Duration
	a.r.iter = timedStats{a.r.iter, &kernel}
	if a.r.lsrc.iter != nil {
		a.r.lsrc.iter = timedLinks{a.r.lsrc.iter, &kernel}
	}
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
