package profiler

import (
	"errors"
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
		refusedOrFatal(t, err)
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

// metric logs a figure for the kernel matrix's table.
func metric(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("metric %s=%v", name, v)
}

// attachShapeOrSkip attaches with o; a session the kernel does not have
// or refuses on a BPF program skips with its words (no matrix entry is
// recorded as having it), a refused pair goes through attachOrSkip's rule.
func attachShapeOrSkip(t *testing.T, target *ebpf.Program, o Options) *Profiler {
	t.Helper()
	if o.Shape != ShapeSession {
		p, err := AttachWith(target, o)
		if err != nil {
			refusedOrFatal(t, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	p, err := AttachWith(target, o)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			refusedOrFatal(t, err)
		}
		expect.SkipUnlessExpected(t, expect.FeatFsessionOnBPF, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func refusedOrFatal(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(t, expect.FeatFentryOnBPF, err)
	}
	t.Fatal(err)
}

// Two targets whose runs are bpf_loop of 20 and 2,000 iterations, fired a
// known number of times with global stats off, for each shape and with
// every run timed or 1 in 8: each histogram counts exactly its runs (and
// times 1 in 8 of them per CPU when sampled), the long target's
// percentiles lie above the short one's, and p50 <= p90 <= p99 <= max.
func TestProfilesTimedTargets(t *testing.T) {
	const short, long, fires = 20, 2000, 1000
	ts := loadTarget(t, short)
	tl := loadTarget(t, long)
	t.Logf("fsession in kernel BTF: %v", HaveSession())
	for _, o := range []Options{{Shape: ShapePair}, {Shape: ShapeSession}, {Shape: ShapePair, SampleEvery: 8}, {Shape: ShapeSession, SampleEvery: 8}} {
		name := strings.ReplaceAll(string(o.Shape), "/", "-")
		if o.SampleEvery > 1 {
			name += "-1in" + strconv.Itoa(int(o.SampleEvery))
		}
		t.Run(name, func(t *testing.T) {
			ps := attachShapeOrSkip(t, ts.Prog, o)
			pl := attachShapeOrSkip(t, tl.Prog, o)
			defer ps.Close()
			defer pl.Close()
			if ps.Target.Func != "timed_target" {
				t.Errorf("target function %q, want timed_target (from BTF func info)", ps.Target.Func)
			}
			if ps.Shape != o.Shape {
				t.Errorf("attached %s, asked for %s", ps.Shape, o.Shape)
			}
			checkTimedTargets(t, ts, tl, ps, pl, fires, uint64(max(o.SampleEvery, 1)), name)
		})
	}
	// Windowed: prof_count counts every run, the timing programs time only
	// while attached (and are loaded anew for the second window): 300
	// runs outside, 1,000 in a window, 200 outside, 500 in a window.
	t.Run("windowed", func(t *testing.T) {
		p, err := AttachWith(ts.Prog, Options{Windowed: true})
		if err != nil {
			refusedOrFatal(t, err)
		}
		defer p.Close()
		for _, step := range []struct {
			timing bool
			runs   int
		}{{false, 300}, {true, fires}, {false, 200}, {true, 500}} {
			if err := p.SetTiming(step.timing); err != nil {
				t.Fatal(err)
			}
			if err := ts.Trigger(step.runs); err != nil {
				t.Fatal(err)
			}
		}
		h, err := p.Read()
		if err != nil {
			t.Fatal(err)
		}
		if h.Count != 300+fires+200+500 || h.Timed != fires+500 {
			t.Errorf("windowed %s: %d runs, %d timed; want %d runs, %d timed", p.Shape, h.Count, h.Timed, 300+fires+200+500, fires+500)
		}
		t.Logf("windowed %s: runs %d timed %d p50 %.0f ns", p.Shape, h.Count, h.Timed, h.Quantile(0.5))
	})
	p := attachOrSkip(t, ts.Prog)
	if p.Shape != ShapePair {
		t.Errorf("default shape %s, want %s", p.Shape, ShapePair)
	}
}

func checkTimedTargets(t *testing.T, ts, tl *TimedTarget, ps, pl *Profiler, fires int, every uint64, name string) {
	t.Helper()
	if err := ts.Trigger(fires); err != nil {
		t.Fatal(err)
	}
	if err := tl.Trigger(fires); err != nil {
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
	cpus, _ := ebpf.PossibleCPU()
	for _, c := range []struct {
		name string
		h    Histogram
	}{{"short", hs}, {"long", hl}} {
		if c.h.Count != uint64(fires) {
			t.Errorf("%s: %d runs profiled, want %d", c.name, c.h.Count, fires)
		}
		// Each CPU times its runs number 0, every, 2*every, ...: the
		// ceiling of its share over every, summed.
		lo, hi := uint64(fires)/every, uint64(fires)/every+uint64(cpus)
		if every == 1 {
			hi = lo
		}
		if c.h.Timed < lo || c.h.Timed > hi {
			t.Errorf("%s: %d runs timed, want %d..%d (1 in %d of %d on %d CPUs)", c.name, c.h.Timed, lo, hi, every, fires, cpus)
		}
		var sum uint64
		for _, n := range c.h.Buckets {
			sum += n
		}
		if sum != c.h.Timed {
			t.Errorf("%s: buckets sum to %d, timed %d", c.name, sum, c.h.Timed)
		}
		p50, p90, p99 := c.h.Quantile(0.5), c.h.Quantile(0.9), c.h.Quantile(0.99)
		if !(p50 <= p90 && p90 <= p99 && p99 <= float64(c.h.MaxNs)) || p50 <= 0 {
			t.Errorf("%s: p50 %.0f p90 %.0f p99 %.0f max %d: want 0 < p50 <= p90 <= p99 <= max", c.name, p50, p90, p99, c.h.MaxNs)
		}
		t.Logf("%s %s: runs %d timed %d p50 %.0f ns p90 %.0f p99 %.0f max %d mean %.0f", name, c.name, c.h.Count, c.h.Timed, p50, p90, p99, c.h.MaxNs, c.h.MeanNs())
		metric(t, "profiler."+name+"."+c.name+".runs", c.h.Count)
	}
	// 100x the loop: the long p50 lies buckets above the short one. Not the
	// mean: one run preempted for milliseconds (TCG does that) moves it.
	if !(hl.Quantile(0.5) > 4*hs.Quantile(0.5)) || !(hl.Quantile(0.9) > hs.Quantile(0.9)) {
		t.Errorf("long target p50 %.0f, p90 %.0f not above 4x the short one's p50 %.0f and its p90 %.0f", hl.Quantile(0.5), hl.Quantile(0.9), hs.Quantile(0.5), hs.Quantile(0.9))
	}
	metric(t, "profiler."+name+".long_over_short_p50_above_1", hl.Quantile(0.5) > hs.Quantile(0.5))
}

func TestQuantile(t *testing.T) {
	var h Histogram
	h.Buckets[4] = 50 // [16, 32)
	h.Buckets[10] = 50
	h.Count, h.Timed, h.MaxNs = 100, 100, 1500
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
