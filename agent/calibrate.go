package agent

import (
	"context"
	"time"

	"github.com/bpfleet/bpfleet/probes/bench"
)

// Calibrate measures what each attach type costs on this node with the
// agent's own probes (probes/bench: a trigger without and with a counting
// probe, bounded by budget) and carries the result in every later snapshot
// as the per-attach-type overhead. The probes are ordinary BPF programs:
// while they run, the agent's scans report them like anyone else's.
func (a *Agent) Calibrate(ctx context.Context, budget time.Duration) ([]Calibration, error) {
	rs, err := bench.Calibrate(ctx, budget)
	out := make([]Calibration, 0, len(rs))
	for _, r := range rs {
		out = append(out, Calibration{AttachType: r.AttachType, Mode: r.Mode, Supported: r.Supported, Reason: r.Reason, OverheadNs: r.OverheadNs})
	}
	if len(out) > 0 {
		a.SetCalibration(out)
	}
	return out, err
}
