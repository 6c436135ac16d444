//go:build bench

package profiler

// Figures, not checks: the profiler's and the clock's cost per run against
// the stats tax, printed by `make bench BENCH=profiler` (in the VMs, and the
// clock on the host). Kept out of `make test`: they assert nothing, and
// under TCG they re-patch trampolines for half a minute per entry.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// costRig fires a target in rounds of n test runs and measures the stats
// tax beside each variant: TCG timings drift with the host's load over
// seconds, so every variant gets its own baseline and stats figure,
// measured just before and after it.
type costRig struct {
	t  *testing.T
	tt *TimedTarget
	n  int
}

// least is the fastest round: the host's other load only ever adds to a
// round under TCG, so the minimum is the steadiest estimate (medians of
// 5 moved by 2x between passes).
func least(xs []float64) float64 {
	xs = append([]float64(nil), xs...)
	sort.Float64s(xs)
	return xs[0]
}

func (c *costRig) fire() float64 {
	ns, err := c.tt.Fire(c.n)
	if err != nil {
		c.t.Fatal(err)
	}
	return ns
}

// warm fires a tenth of a round unmeasured: each switch (stats' static
// key, a trampoline attached or detached) patches kernel text, and TCG
// then translates the patched code again on its first runs.
func (c *costRig) warm() {
	if _, err := c.tt.Fire(c.n / 10); err != nil {
		c.t.Fatal(err)
	}
}

// baseline is 5 rounds of nothing alternated with 5 of stats on.
func (c *costRig) baseline() (base, stats []float64) {
	for range 5 {
		c.warm()
		base = append(base, c.fire())
		fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			c.t.Skipf("BPF_ENABLE_STATS: %v", err)
		}
		c.warm()
		stats = append(stats, c.fire())
		fd.Close()
	}
	return base, stats
}

// statsHeldElsewhere skips where the stats-off baseline cannot be measured.
func statsHeldElsewhere(t *testing.T, tt *TimedTarget) {
	t.Helper()
	if st, err := tt.Prog.Stats(); err != nil || statsSysctl() != "0" {
		t.Skipf("stats state unknown or the sysctl keeps them on (%v)", err)
	} else if err := tt.Trigger(10); err != nil {
		t.Fatal(err)
	} else if st2, _ := tt.Prog.Stats(); st2.RunCount != st.RunCount {
		t.Skip("BPF stats are held elsewhere: the stats-off baseline cannot be measured")
	}
}

// The profiler's own cost per run against the stats tax on the same no-op
// target, in the same run: for each shape, ns per run added over nothing,
// against what stats on add measured around it (5+3 rounds of nothing,
// 5 of stats on, 5 with the variant; the fastest of each; 50,000 test
// runs a round, each after a warm-up).
// The floors (an empty fentry; an empty fentry+fexit) split the
// trampoline's share from the clock's. A figure, not a metric: TCG timings
// differ between architectures.
func TestProfilerCostAgainstStats(t *testing.T) {
	tt := loadTarget(t, 0)
	statsHeldElsewhere(t, tt)
	cs, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	t.Logf("clocksource %s; fsession in kernel BTF: %v", strings.TrimSpace(string(cs)), HaveSession())
	c := &costRig{t: t, tt: tt, n: 50_000}
	variants := []struct {
		name string
		o    Options
	}{
		{"floor: empty fentry", Options{Shape: shapeFloorEntry}},
		{"floor: empty fentry+fexit", Options{Shape: shapeFloor}},
		{"fentry/fexit, every run timed", Options{Shape: ShapePair}},
		{"fentry/fexit, 1 in 8 timed", Options{Shape: ShapePair, SampleEvery: 8}},
		{"fentry/fexit, 1 in 64 timed", Options{Shape: ShapePair, SampleEvery: 64}},
		{"fsession, every run timed", Options{Shape: ShapeSession}},
		{"fsession, 1 in 8 timed", Options{Shape: ShapeSession, SampleEvery: 8}},
		{"fsession, 1 in 64 timed", Options{Shape: ShapeSession, SampleEvery: 64}},
		{"fsession, 1 in 64, entry returns 1", Options{Shape: ShapeSession, SampleEvery: 64, skipExit: true}},
		{"windowed, outside a window (count)", Options{Windowed: true}},
		{"windowed, timing 1 round in 10", Options{Windowed: true}},
		{"windowed uncounted, 1 round in 10", Options{Windowed: true, Uncounted: true}},
	}
	for pass := 1; pass <= 2; pass++ {
		for _, v := range variants {
			base, stats := c.baseline()
			p, err := AttachWith(tt.Prog, v.o)
			if err != nil {
				if v.o.Shape == ShapeSession {
					t.Logf("cost: pass %d: %s: not measured: %v", pass, v.name, err)
					continue
				}
				refusedOrFatal(t, err)
			}
			var xs []float64
			if strings.Contains(v.name, "1 round in 10") {
				// As the agent would for 1 s of 10 s: the trampoline
				// rewritten twice per 10 rounds of 4x the runs, the mean
				// of the 10 (twice; the fastest).
				big := &costRig{t: t, tt: tt, n: 4 * c.n}
				for range 2 {
					var sum float64
					for r := range 10 {
						if r <= 1 {
							if err := p.SetTiming(r == 0); err != nil {
								t.Fatal(err)
							}
						}
						sum += big.fire()
					}
					xs = append(xs, sum/10)
				}
			} else {
				c.warm()
				for range 5 {
					xs = append(xs, c.fire())
				}
			}
			h, err := p.Read()
			if err != nil {
				t.Fatal(err)
			}
			extra := ""
			if v.o.Shape == ShapeSession {
				extra = fmt.Sprintf(", %d exit runs", exitRuns(p))
			}
			p.Close()
			c.warm()
			for range 3 {
				base = append(base, c.fire())
			}
			b, s := least(base), least(stats)
			add := least(xs) - b
			t.Logf("cost: pass %d: %-36s +%5.0f ns/run = %5.2f x stats (+%.0f here; nothing %.0f; %d runs, %d timed%s)",
				pass, v.name, add, add/(s-b), s-b, b, h.Count, h.Timed, extra)
			// A test run cut short by a signal is repeated: at least, not
			// exactly, n per fire.
			rounds := 5
			if len(xs) == 2 {
				rounds = 80
			}
			if counts := v.o.Shape != shapeFloor && v.o.Shape != shapeFloorEntry && !v.o.Uncounted; counts && h.Count < uint64(c.n*rounds) {
				t.Errorf("%s: counted %d runs, want at least %d", v.name, h.Count, c.n*rounds)
			}
		}
	}
}

// What timing a run costs without any trampoline, where tracing is refused
// too (the CI host): a socket filter reading bpf_ktime_get_ns twice (as the
// profiler's entry and exit do) against one that does not, beside the
// stats tax on the latter, same run. Stats read the clock twice as well
// (sched_clock): where the two cost alike, a profiler that times every run
// cannot undercut stats, whatever the trampoline costs.
func TestClockCostAgainstStats(t *testing.T) {
	none, err := loadTarget0("clock_none")
	if err != nil {
		t.Skipf("clock_none: %v", err)
	}
	defer none.Close()
	twice, err := loadTarget0("clock_twice")
	if err != nil {
		t.Fatalf("clock_twice: %v", err)
	}
	defer twice.Close()
	statsHeldElsewhere(t, none)
	c := &costRig{t: t, tt: none, n: 200_000}
	ct := &costRig{t: t, tt: twice, n: 200_000}
	var clocks []float64
	var base, stats []float64
	for range 3 {
		b, s := c.baseline()
		base, stats = append(base, b...), append(stats, s...)
		clocks = append(clocks, ct.fire())
	}
	b, s, k := least(base), least(stats), least(clocks)
	t.Logf("clock: nothing %.1f ns/run; stats on +%.1f ns/run; two bpf_ktime_get_ns +%.1f ns/run (%.2f x stats)", b, s-b, k-b, (k-b)/(s-b))
}

func loadTarget0(name string) (*TimedTarget, error) { return loadNamedTarget(name, 0) }

func statsSysctl() string {
	b, _ := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return strings.TrimSpace(string(b))
}

// exitRuns is the session program's exit runs.
func exitRuns(p *Profiler) uint64 {
	var per []profilerHist
	var n uint64
	if p.hist.Lookup(uint32(0), &per) == nil {
		for _, c := range per {
			n += c.Exits
		}
	}
	return n
}
