package profiler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// attachOrSkip attaches the profiler, skipping with the kernel's words
// where it refuses tracing a BPF program (the CI host: EPERM).
func attachOrSkip(t *testing.T, target *ebpf.Program) *Profiler {
	t.Helper()
	p, err := Attach(target)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
			if expect.Expected(expect.FeatFentryOnBPF) {
				t.Fatalf("kernel refuses fentry/fexit on a BPF program on %s, where it was measured present: %v", expect.Entry(), err)
			}
			t.Skipf("kernel refuses fentry/fexit on a BPF program: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func loadTarget(t *testing.T, loops uint32) *TimedTarget {
	t.Helper()
	tt, err := LoadTimedTarget(loops)
	if err != nil {
		t.Skipf("timed target (bpf_loop): %v", err)
	}
	t.Cleanup(func() { tt.Close() })
	return tt
}

func statsSysctl() string {
	b, _ := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return strings.TrimSpace(string(b))
}

// metric logs a figure for the kernel matrix's table.
func metric(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("metric %s=%v", name, v)
}

// Two targets whose runs are bpf_loop of 20 and 2,000 iterations, fired a
// known number of times with global stats off: each histogram counts
// exactly its runs, the long target's percentiles lie above the short
// one's, and p50 <= p90 <= p99 <= max within each.
func TestProfilesTimedTargets(t *testing.T) {
	const short, long, fires = 20, 2000, 1000
	ts := loadTarget(t, short)
	tl := loadTarget(t, long)
	ps := attachOrSkip(t, ts.Prog)
	pl := attachOrSkip(t, tl.Prog)
	if ps.Target.Func != "timed_target" {
		t.Errorf("target function %q, want timed_target (from BTF func info)", ps.Target.Func)
	}
	if _, err := ts.Fire(fires); err != nil {
		t.Fatal(err)
	}
	if _, err := tl.Fire(fires); err != nil {
		t.Fatal(err)
	}
	hs, err := ps.Read()
	if err != nil {
		t.Fatal(err)
	}
	hl, err := pl.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		h    Histogram
	}{{"short", hs}, {"long", hl}} {
		if c.h.Count != fires {
			t.Errorf("%s: %d runs profiled, want %d", c.name, c.h.Count, fires)
		}
		var sum uint64
		for _, n := range c.h.Buckets {
			sum += n
		}
		if sum != c.h.Count {
			t.Errorf("%s: buckets sum to %d, count %d", c.name, sum, c.h.Count)
		}
		p50, p90, p99 := c.h.Quantile(0.5), c.h.Quantile(0.9), c.h.Quantile(0.99)
		if !(p50 <= p90 && p90 <= p99 && p99 <= float64(c.h.MaxNs)) || p50 <= 0 {
			t.Errorf("%s: p50 %.0f p90 %.0f p99 %.0f max %d: want 0 < p50 <= p90 <= p99 <= max", c.name, p50, p90, p99, c.h.MaxNs)
		}
		t.Logf("%s: runs %d p50 %.0f ns p90 %.0f p99 %.0f max %d mean %.0f", c.name, c.h.Count, p50, p90, p99, c.h.MaxNs, float64(c.h.SumNs)/float64(c.h.Count))
		metric(t, "profiler."+c.name+".runs", c.h.Count)
	}
	// 100x the loop: the long p50 lies buckets above the short one. Not the
	// mean: one run preempted for milliseconds (TCG does that) moves it.
	if !(hl.Quantile(0.5) > 4*hs.Quantile(0.5)) || !(hl.Quantile(0.9) > hs.Quantile(0.9)) {
		t.Errorf("long target p50 %.0f, p90 %.0f not above 4x the short one's p50 %.0f and its p90 %.0f", hl.Quantile(0.5), hl.Quantile(0.9), hs.Quantile(0.5), hs.Quantile(0.9))
	}
	metric(t, "profiler.long_over_short_p50_above_1", hl.Quantile(0.5) > hs.Quantile(0.5))
	if statsSysctl() == "0" {
		// Global stats off: the kernel's own run count of the target
		// does not move, only the profiler counts.
		st, err := ts.Prog.Stats()
		if err == nil && st.RunCount != 0 {
			t.Logf("target run_cnt %d: stats are held elsewhere during this test", st.RunCount)
		}
	}
}

// The profiler's own cost per run against the stats tax, same run, same
// no-op target: ns per run with nothing, with stats on, with the profiler
// (stats off), each the median of 5 rounds of 20,000 test runs.
func TestProfilerCostAgainstStats(t *testing.T) {
	tt := loadTarget(t, 0)
	if st, err := tt.Prog.Stats(); err != nil || statsSysctl() != "0" {
		t.Skipf("stats state unknown or the sysctl keeps them on (%v)", err)
	} else if _, err := tt.Fire(10); err != nil {
		t.Fatal(err)
	} else if st2, _ := tt.Prog.Stats(); st2.RunCount != st.RunCount {
		t.Skip("BPF stats are held elsewhere: the stats-off baseline cannot be measured")
	}
	const n, rounds = 20_000, 5
	median := func(xs []float64) float64 {
		for i := range xs {
			for j := i + 1; j < len(xs); j++ {
				if xs[j] < xs[i] {
					xs[i], xs[j] = xs[j], xs[i]
				}
			}
		}
		return xs[len(xs)/2]
	}
	var base, stats []float64
	fire := func() float64 {
		ns, err := tt.Fire(n)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	for r := 0; r < rounds; r++ {
		base = append(base, fire())
		fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			t.Skipf("BPF_ENABLE_STATS: %v", err)
		}
		stats = append(stats, fire())
		fd.Close()
	}
	p := attachOrSkip(t, tt.Prog)
	var prof []float64
	for r := 0; r < rounds; r++ {
		prof = append(prof, fire())
	}
	b, s, pr := median(base), median(stats), median(prof)
	statsAdd, profAdd := s-b, pr-b
	t.Logf("no-op target: %.0f ns/run; stats on +%.0f ns; profiler +%.0f ns (%d runs profiled)", b, statsAdd, profAdd, mustCount(t, p))
	fmt.Printf("BENCH profiler adds %.0f ns/run, stats on adds %.0f ns/run to every program: ratio %.2f\n", profAdd, statsAdd, profAdd/statsAdd)
	// A figure, not a metric: the kernel matrix compares metrics across
	// architectures, and TCG timings differ between them.
	t.Logf("profiler/stats cost ratio %s%%", strconv.Itoa(int(100*profAdd/statsAdd)))
}

func mustCount(t *testing.T, p *Profiler) uint64 {
	h, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	return h.Count
}

func TestQuantile(t *testing.T) {
	var h Histogram
	h.Buckets[4] = 50 // [16, 32)
	h.Buckets[10] = 50
	h.Count, h.MaxNs = 100, 1500
	for _, c := range []struct{ q, lo, hi float64 }{
		{0.25, 16, 32}, {0.5, 16, 32}, {0.75, 1024, 1500}, {1, 1500, 1500},
	} {
		if v := h.Quantile(c.q); v < c.lo || v > c.hi {
			t.Errorf("q%.2f = %.1f, want in [%.0f, %.0f]", c.q, v, c.lo, c.hi)
		}
	}
	if (&Histogram{}).Quantile(0.5) != 0 {
		t.Error("empty histogram: want 0")
	}
}
