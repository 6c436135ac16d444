//go:build bench

package agent

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfleet/bpfleet/test/steady"
)

// TestBenchStatsModes (make bench, section statstax) measures the tax each
// --stats mode puts on a program that runs flat out: a no-op XDP program
// run by BPF_PROG_TEST_RUN for two sampling periods (1 s of 10 s) per mode,
// the kernel's mean ns per run against stats off before and after, and the
// sampled run count of a program fired at a steady rate against the runs
// made. Figures only: the machine is shared.
func TestBenchStatsModes(t *testing.T) {
	skipIfStatsOn(t)
	xdp, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "bench_xdp", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer xdp.Close()
	pkt := make([]byte, 64)
	const span = 20 * time.Second
	meanNs := func(mode StatsMode) float64 {
		var a *Agent
		if mode != StatsOff {
			a = newTestAgentWith(t, Config{StatsMode: mode, NoIterator: true})
			defer a.Close()
		}
		var total time.Duration
		var runs int
		for end := time.Now().Add(span); time.Now().Before(end); {
			_, d, err := xdp.Benchmark(pkt, 100_000, nil)
			if err != nil {
				t.Fatal(err)
			}
			total += d * 100_000
			runs += 100_000
		}
		return float64(total.Nanoseconds()) / float64(runs)
	}
	off1 := meanNs(StatsOff)
	always := meanNs(StatsAlways)
	sampled := meanNs(StatsSampled)
	off2 := meanNs(StatsOff)
	off := (off1 + off2) / 2
	taxAlways, taxSampled := always-off, sampled-off
	fmt.Printf("BENCH stats modes, no-op xdp flat out, %v each: off %.2f/%.2f ns/run, always %.2f (+%.2f), sampled 1s/10s %.2f (+%.2f): sampled cuts the tax %.1fx (target >= 8x)\n",
		span, off1, off2, always, taxAlways, sampled, taxSampled, taxAlways/math.Max(taxSampled, 0.01))

	const rate = 100_000.0
	sp := steady.Start(t, "steady", rate)
	id := sp.ID
	a := newTestAgentWith(t, Config{StatsMode: StatsSampled, NoIterator: true})
	scan(t, a)
	time.Sleep(10 * time.Second) // one period: the first rate
	scan(t, a)
	f1 := sp.Fired()
	var est uint64
	for i := 0; i < 3; i++ {
		time.Sleep(10 * time.Second)
		est += findProg(scan(t, a), id).Delta.Runs
	}
	truth := sp.Fired() - f1
	fmt.Printf("BENCH sampled 1s/10s run count, steady %.0f runs/s over 30 s: estimate %d, runs made %d, error %.2f%% (target 5%%)\n",
		rate, est, truth, 100*math.Abs(float64(est)-float64(truth))/float64(truth))
}
