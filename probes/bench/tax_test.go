package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// skipIfHeldElsewhere skips when the kernel keeps stats on without us: the
// off half cannot be measured then.
func skipIfHeldElsewhere(t *testing.T, rs []TaxResult) {
	t.Helper()
	for _, r := range rs {
		if strings.HasPrefix(r.Reason, HeldElsewhere) {
			t.Skipf("%s: %s", r.Kind, r.Reason)
		}
	}
}

func TestTaxTestRunIsPositive(t *testing.T) {
	rs, err := MeasureTax(context.Background(), TaxOptions{AttachTypes: []catalog.AttachType{}, Repeat: 50_000, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	skipIfHeldElsewhere(t, rs)
	if len(rs) != 2 {
		t.Fatalf("want xdp and tc, got %+v", rs)
	}
	for _, r := range rs {
		if !r.Measured {
			t.Errorf("%s: not measured: %s", r.Kind, r.Reason)
			continue
		}
		// Stats on reads the clock twice per run: it cannot be free.
		if !(r.TaxNs > 0) || !(r.OnNs > r.OffNs) {
			t.Errorf("%s: stats tax %.1f ns (off %.1f, on %.1f): want on > off", r.Kind, r.TaxNs, r.OffNs, r.OnNs)
		}
		if r.TaxNsMin > r.TaxNs || r.TaxNs > r.TaxNsMax {
			t.Errorf("%s: median %.1f outside spread %.1f..%.1f", r.Kind, r.TaxNs, r.TaxNsMin, r.TaxNsMax)
		}
		t.Logf("%s: off %.1f ns, on %.1f ns, tax %+.1f ns/run", r.Kind, r.OffNs, r.OnNs, r.TaxNs)
	}
}

func TestTaxProbes(t *testing.T) {
	types := supported(t, catalog.Kernel)
	if len(types) == 0 {
		t.Skip("kernel accepts no attach type in kernel mode")
	}
	rs, err := MeasureTax(context.Background(), TaxOptions{AttachTypes: types, NoTestRun: true, Mode: catalog.Kernel, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	skipIfHeldElsewhere(t, rs)
	for _, r := range rs {
		if !r.Measured {
			t.Errorf("%s: the kernel accepted it, the tax says %q", r.Kind, r.Reason)
			continue
		}
		if !(r.TaxNs > 0) {
			t.Errorf("%s: stats tax %.1f ns (off %.1f, on %.1f): want on > off", r.Kind, r.TaxNs, r.OffNs, r.OnNs)
		}
		t.Logf("%s (%s): off %.1f ns, on %.1f ns, tax %+.1f ns/run", r.Kind, r.Method, r.OffNs, r.OnNs, r.TaxNs)
	}
}

// A stats fd held by someone else (here: this test, as another tool would)
// makes the off half count runs: the tax must say so, not give a number.
func TestTaxSaysHeldElsewhere(t *testing.T) {
	fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Skipf("BPF_ENABLE_STATS: %v", err)
	}
	defer fd.Close()
	rs, err := MeasureTax(context.Background(), TaxOptions{AttachTypes: []catalog.AttachType{}, Repeat: 1000, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Measured || !strings.HasPrefix(r.Reason, HeldElsewhere) {
			t.Errorf("%s: measured %v, reason %q; want %q", r.Kind, r.Measured, r.Reason, HeldElsewhere)
		}
	}
}

// A budget spent before or during the measurement: every kind is in the
// result, those not measured saying so, and the error says why it stopped.
func TestTaxBudgetSpent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	rs, err := MeasureTax(ctx, TaxOptions{AttachTypes: []catalog.AttachType{catalog.RawTp}, Rounds: 1})
	skipIfHeldElsewhere(t, rs)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the deadline", err)
	}
	if len(rs) != 3 {
		t.Fatalf("want xdp, tc and raw_tp, got %+v", rs)
	}
	for _, r := range rs {
		if r.Measured || r.Reason != "not measured: time budget spent" {
			t.Errorf("%s: measured %v, reason %q", r.Kind, r.Measured, r.Reason)
		}
	}
}
