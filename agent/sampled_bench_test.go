package agent

import (
	"context"
	"testing"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
)

// BenchmarkScanSampled is BenchmarkScan with --stats=sampled (1 s of every
// 10 s): every program goes through the sampler each scan, and each scan
// looks whether another holder keeps stats on while the agent holds none.
// BenchmarkScanAlways is the same agent with stats always on, the same
// run's baseline.
func BenchmarkScanSampled(b *testing.B) { benchScanMode(b, StatsSampled) }

func BenchmarkScanAlways(b *testing.B) { benchScanMode(b, StatsAlways) }

func benchScanMode(b *testing.B, mode StatsMode) {
	scantest.LoadPrograms(b, 1000)
	a, err := New(Config{StatsMode: mode})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	for range 2 { // warm the static cache; drain the agent's own loads
		if _, err := a.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
	scantest.BenchAgainstFloor(b, false, func() int {
		s, err := a.Scan(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return len(s.Programs)
	})
}
