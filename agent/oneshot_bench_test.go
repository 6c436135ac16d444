package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// BenchmarkOneShotPin is what `bpfleet list -o json --no-owners` costs
// in-process over 1,000 extra programs with an agent running: New (which
// opens the agent's pinned stats iterator), one Scan, Close. In the same
// loop, alternated, the floor: opening the same pin and reading it once
// (the kernel's pass and the records' decoding, nothing of the snapshot).
// Each part reports its time, bytes and allocations per iteration; the
// benchmark's own B/op and allocs/op are both parts together.
func BenchmarkOneShotPin(b *testing.B) {
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("bpfleet-agentbench-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Skipf("cannot use the host's bpffs at /sys/fs/bpf: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		b.Fatal(err)
	}
	pub, err := progstats.Publish(dir, cpus) // what the agent does at start
	if err != nil {
		b.Skipf("the kernel refuses the stats iterator: %v", err)
	}
	b.Cleanup(func() { pub.Close() })
	scantest.LoadPrograms(b, 1000)
	ctx := context.Background()
	cfg := Config{OneShot: true, BPFFS: []string{dir}, Parallel: runtime.NumCPU()}
	oneShot := func() {
		a, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		s, err := a.Scan(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if s.Scan.IteratorPin == "" {
			b.Fatalf("the scan did not read the pin: %+v", s.Scan)
		}
		a.Close()
	}
	floor := func() {
		it, err := progstats.OpenPinned(dir, cpus)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := it.ReadStats(nil, nil); err != nil {
			b.Fatal(err)
		}
		it.Close()
	}
	oneShot() // first-use costs (encoders, BTF names) out of the loop
	type part struct {
		t              time.Duration
		bytes, mallocs uint64
	}
	var ms runtime.MemStats
	measure := func(p *part, fn func()) {
		runtime.ReadMemStats(&ms)
		b0, m0 := ms.TotalAlloc, ms.Mallocs
		t0 := time.Now()
		fn()
		p.t += time.Since(t0)
		runtime.ReadMemStats(&ms)
		p.bytes += ms.TotalAlloc - b0
		p.mallocs += ms.Mallocs - m0
	}
	var one, fl part
	b.ReportAllocs()
	for b.Loop() {
		measure(&one, oneShot)
		measure(&fl, floor)
	}
	n := float64(b.N)
	b.ReportMetric(float64(one.t.Nanoseconds())/n, "oneshot-ns")
	b.ReportMetric(float64(one.bytes)/n, "oneshot-B")
	b.ReportMetric(float64(one.mallocs)/n, "oneshot-allocs")
	b.ReportMetric(float64(fl.t.Nanoseconds())/n, "pinread-ns")
	b.ReportMetric(float64(fl.bytes)/n, "pinread-B")
	b.ReportMetric(float64(fl.mallocs)/n, "pinread-allocs")
	b.ReportMetric(float64(one.t)/float64(fl.t), "x-pinread")
}
