package bench

import (
	"context"
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/bpfleet/bpfleet/probes/features"
	"golang.org/x/sys/unix"
)

// supported lists the attach types this kernel accepts in mode m, asked
// of the kernel.
func supported(t *testing.T, m catalog.Mode) []catalog.AttachType {
	var out []catalog.AttachType
	for _, typ := range catalog.All() {
		if err := features.HaveAttachType(typ, m); err != nil {
			t.Logf("%s (%s): %s", typ, m, features.Reason(err))
			continue
		}
		out = append(out, typ)
	}
	return out
}

func TestBenchGivesPositiveOverhead(t *testing.T) {
	for _, m := range []catalog.Mode{catalog.Syscall, catalog.Kernel} {
		t.Run(string(m), func(t *testing.T) {
			types := supported(t, m)
			if len(types) == 0 {
				t.Skipf("kernel accepts no attach type in %s mode", m)
			}
			calls := 50_000
			if m == catalog.Kernel {
				calls = 500_000
			}
			rep, err := Run(context.Background(), Options{AttachTypes: types, Mode: m, Calls: calls, Rounds: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Results) != len(types) {
				t.Fatalf("%d results for %d attach types", len(rep.Results), len(types))
			}
			for _, r := range rep.Results {
				if !r.Supported {
					t.Errorf("%s: the kernel accepted it, the bench says %q", r.AttachType, r.Reason)
					continue
				}
				if r.Mode != string(m) {
					t.Errorf("%s measured in mode %s, asked %s", r.AttachType, r.Mode, m)
				}
				if !(r.OverheadNs > 0) || !(r.NsPerCall > r.BaselineNsPerCall) || !(r.DiffPct < 0) {
					t.Errorf("%s: no overhead measured: baseline %.1f ns, with probe %.1f ns, overhead %.1f ns", r.AttachType, r.BaselineNsPerCall, r.NsPerCall, r.OverheadNs)
				}
				if r.OverheadNsMin > r.OverheadNs || r.OverheadNs > r.OverheadNsMax {
					t.Errorf("%s: median %.1f outside spread %.1f..%.1f", r.AttachType, r.OverheadNs, r.OverheadNsMin, r.OverheadNsMax)
				}
				if math.Abs(r.OpsPerSec*r.NsPerCall-1e9) > 1 {
					t.Errorf("%s: ops/s %.0f does not match %.1f ns/call", r.AttachType, r.OpsPerSec, r.NsPerCall)
				}
				t.Logf("%s: +%.1f ns/call (%.1f -> %.1f)", r.AttachType, r.OverheadNs, r.BaselineNsPerCall, r.NsPerCall)
			}
			var b strings.Builder
			if err := WriteTable(&b, rep); err != nil {
				t.Fatal(err)
			}
			for _, typ := range types {
				if !strings.Contains(b.String(), "| "+string(typ)+" |") {
					t.Errorf("table has no row for %s:\n%s", typ, b.String())
				}
			}
		})
	}
}

// With stats on, the kernel accounts the probe's run time: the result must
// say so and carry the kernel's own ns per run.
func TestBenchStatsOn(t *testing.T) {
	types := supported(t, catalog.Syscall)
	if len(types) == 0 {
		t.Skip("kernel accepts no attach type")
	}
	rep, err := Run(context.Background(), Options{AttachTypes: types[:1], Mode: catalog.Syscall, Calls: 20_000, Rounds: 1, Stats: StatsOn})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if !r.StatsEnabled || !(r.ProgRunNs > 0) {
		t.Errorf("%s with stats on: stats_enabled=%v prog_run_ns=%.1f", r.AttachType, r.StatsEnabled, r.ProgRunNs)
	}
}

func TestRefusedTypesCarryReason(t *testing.T) {
	var refused []catalog.AttachType
	for _, typ := range catalog.All() {
		if features.HaveAttachType(typ, catalog.Syscall) != nil {
			refused = append(refused, typ)
		}
	}
	if len(refused) == 0 {
		t.Skip("this kernel accepts every attach type")
	}
	rep, err := Run(context.Background(), Options{AttachTypes: refused, Mode: catalog.Syscall, Calls: 10, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		want := features.Reason(features.HaveAttachType(catalog.AttachType(r.AttachType), catalog.Syscall))
		if r.Supported || r.Reason != want {
			t.Errorf("%s: supported=%v reason %q, kernel said %q", r.AttachType, r.Supported, r.Reason, want)
		}
	}
}

func TestJSONFields(t *testing.T) {
	b, err := json.Marshal(Report{Results: []Result{{AttachType: "raw_tp", Supported: true, Rounds: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"attach_type", "supported", "baseline_ns_per_call", "ns_per_call", "overhead_ns", "ops_per_sec", "stats_enabled", "rounds"} {
		if _, ok := got.Results[0][f]; !ok {
			t.Errorf("result JSON has no %q: %s", f, b)
		}
	}
}

func TestCalibrateIsBounded(t *testing.T) {
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	start := time.Now()
	rs, err := Calibrate(context.Background(), calibrateBudget)
	if err != nil {
		t.Fatal(err)
	}
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()+after.Stime.Nano()-before.Stime.Nano()) * time.Nanosecond
	t.Logf("calibration: %s wall, %s CPU", time.Since(start), cpu)
	if cpu > time.Second {
		t.Errorf("calibration used %s of CPU, want well under 1s", cpu)
	}
	if len(rs) != len(catalog.All()) {
		t.Errorf("%d calibration results for %d attach types", len(rs), len(catalog.All()))
	}
	for _, r := range rs {
		if r.Supported && !(r.OverheadNs > 0) {
			t.Errorf("%s calibrated at %.1f ns", r.AttachType, r.OverheadNs)
		}
		if !r.Supported && r.Reason == "" {
			t.Errorf("%s not calibrated and no reason", r.AttachType)
		}
		t.Logf("%s %s supported=%v overhead=%.1fns %s", r.AttachType, r.Mode, r.Supported, r.OverheadNs, r.Reason)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is a number")
	}
}

func TestValidate(t *testing.T) {
	if err := (Options{Mode: "user"}).Validate(); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("bad mode: %v", err)
	}
	if err := (Options{Stats: "maybe"}).Validate(); err == nil || !strings.Contains(err.Error(), "stats") {
		t.Errorf("bad stats: %v", err)
	}
	if err := (Options{Mode: Auto, Stats: StatsBoth}).Validate(); err != nil {
		t.Error(err)
	}
}

// BenchmarkTrigger/<type> is one getpgid call with the probe attached
// (syscall mode); BenchmarkTrigger/none is the bare call. Attach types the
// kernel refuses are skipped with its reason (go test -v shows them).
func BenchmarkTrigger(b *testing.B) {
	benchMode(b, catalog.Syscall)
}

// BenchmarkTriggerKernel/<type> is one in-kernel driver run of
// catalog.DefaultBatch attach-point calls; ns/call is the metric to compare.
func BenchmarkTriggerKernel(b *testing.B) {
	benchMode(b, catalog.Kernel)
}

func benchMode(b *testing.B, m catalog.Mode) {
	types := append([]catalog.AttachType{"none"}, catalog.All()...)
	for _, typ := range types {
		b.Run(string(typ), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			trigType := typ
			if typ == "none" {
				trigType = catalog.RawTp
			}
			trig, err := catalog.NewTrigger(trigType, m, 0)
			if err != nil {
				b.Skipf("no trigger: %s", catalog.Reason(err))
			}
			defer trig.Close()
			if typ != "none" {
				p, err := catalog.Load(typ, m, unix.Gettid())
				if err != nil {
					b.Skipf("kernel refused: %s", catalog.Reason(err))
				}
				defer p.Close()
				if err := p.Attach(); err != nil {
					b.Skipf("kernel refused: %s", catalog.Reason(err))
				}
			}
			per := 1
			if k, ok := trig.(*catalog.KernelTrigger); ok {
				per = k.Batch
			}
			_, restore, err := pin()
			if err != nil {
				b.Fatal(err)
			}
			defer restore()
			b.ResetTimer()
			cpu0 := threadTime()
			calls := 0
			for i := 0; i < b.N; i++ {
				n, err := trig.Fire(per)
				if err != nil {
					b.Fatal(err)
				}
				calls += n
			}
			cpu := threadTime() - cpu0
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(calls), "ns/call")
			// Thread CPU time: what the call cost when the machine is shared.
			b.ReportMetric(float64(cpu)/float64(calls), "cpu-ns/call")
		})
	}
}

// Wall-time budget: the CI machines are shared, so wall time is far above CPU time.
var calibrateBudget = 3 * time.Second
