package agent

import (
	"context"
	"errors"
	"time"

	"github.com/bpfleet/bpfleet/probes/bench"
	"github.com/bpfleet/bpfleet/probes/catalog"
)

// Calibrate measures what each attach type costs on this node with the
// agent's own probes (probes/bench: a trigger without and with a counting
// probe, bounded by budget) and carries the result in every later snapshot
// as the per-attach-type overhead. It then measures the stats tax (see
// CalibrateStats) for the attach types that worked. Both together stay
// within budget: the attach types get three quarters of it, the tax what
// is left. The probes are ordinary BPF programs: while they run, the
// agent's scans report them like anyone else's.
func (a *Agent) Calibrate(parent context.Context, budget time.Duration) ([]Calibration, error) {
	ctx, cancel := context.WithTimeout(parent, budget)
	defer cancel()
	rs, err := bench.Calibrate(ctx, budget*3/4)
	out := make([]Calibration, 0, len(rs))
	var ok []catalog.AttachType
	for _, r := range rs {
		out = append(out, Calibration{AttachType: r.AttachType, Mode: r.Mode, Supported: r.Supported, Reason: r.Reason, Inconclusive: r.Inconclusive, OverheadNs: r.OverheadNs})
		if r.Supported {
			ok = append(ok, catalog.AttachType(r.AttachType))
		}
	}
	if len(out) > 0 {
		a.SetCalibration(out)
	}
	if err != nil {
		return out, err
	}
	_, err = a.CalibrateStats(ctx, ok)
	if errors.Is(err, context.DeadlineExceeded) && parent.Err() == nil {
		// The budget ran out during the tax (a busy node): what was
		// measured stands and the rest says "time budget spent", as for
		// the attach types.
		err = nil
	}
	return out, err
}

// CalibrateStats measures the stats tax per run, stats off and on
// alternated, for a no-op XDP and tc program (BPF_PROG_TEST_RUN) and the
// given attach types (nil: none), and carries it in later snapshots. The
// agent's own stats fd is released while it measures (well under a second:
// runs in that time are not counted in always mode); if stats stay on
// without it, every figure says "not measurable: stats held elsewhere".
func (a *Agent) CalibrateStats(ctx context.Context, types []catalog.AttachType) ([]StatsCost, error) {
	if a.cfg.StatsMode == StatsOff {
		// --stats=off: the agent never turns stats on, not even for the
		// second or two the measurement would tax every program on the
		// node (and flip stats under any other tool reading them).
		return nil, nil
	}
	out, err := a.stats.MeasureTax(ctx, types, a.cfg.ProcRoot)
	a.mu.Lock()
	a.statsCosts = out
	a.mu.Unlock()
	return out, err
}

// overhead is the calibration's overhead per attach type, one value shared
// by every snapshot until the calibration changes.
func (a *Agent) overhead() map[string]*float64 {
	if a.overheads == nil {
		a.overheads = map[string]*float64{}
		for _, c := range a.calibration {
			if c.Supported {
				v := c.OverheadNs
				a.overheads[c.AttachType] = &v
			}
		}
	}
	return a.overheads
}

// oneShotTaxKinds are the attach types a one-shot command (top, list)
// measures the stats tax for, beside xdp and tc: the cheap in-kernel
// triggers; other tracing types take raw_tp's figure.
var oneShotTaxKinds = []catalog.AttachType{catalog.RawTp, catalog.TpBTF, catalog.Tracepoint}

// CalibrateOneShotStats is CalibrateStats for the attach types a one-shot
// command measures (raw_tp, tp_btf, tracepoint), so that the CLI need not
// name probes/catalog's attach types.
func (a *Agent) CalibrateOneShotStats(ctx context.Context) ([]StatsCost, error) {
	return a.CalibrateStats(ctx, oneShotTaxKinds)
}
