package stats

import (
	"context"

	"github.com/bpfleet/bpfleet/probes/bench"
	"github.com/bpfleet/bpfleet/probes/catalog"
)

// MeasureTax is Agent.CalibrateStats' measurement (probes/bench): the
// agent's fd is released while it runs, and a tax not measurable because
// stats are held elsewhere marks them held elsewhere here too.
func (c *Ctl) MeasureTax(ctx context.Context, types []catalog.AttachType, procRoot string) ([]StatsCost, error) {
	if types == nil {
		types = []catalog.AttachType{}
	}
	c.pause()
	rs, err := bench.MeasureTax(ctx, bench.TaxOptions{AttachTypes: types, Rounds: 3, ProcRoot: procRoot})
	c.resume()
	out := make([]StatsCost, 0, len(rs))
	elsewhere := false
	for _, r := range rs {
		out = append(out, StatsCost{Kind: r.Kind, Method: r.Method, Measured: r.Measured, Reason: r.Reason, TaxNs: r.TaxNs, TaxNsMin: r.TaxNsMin, TaxNsMax: r.TaxNsMax})
		if !r.Measured && len(r.Reason) >= len(bench.HeldElsewhere) && r.Reason[:len(bench.HeldElsewhere)] == bench.HeldElsewhere {
			elsewhere = true
		}
	}
	c.setElsewhere(elsewhere)
	return out, err
}
