package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/bpfleet/bpfleet/agent"
)

// measureTax measures the stats cost per run; w (if not nil) gets one line
// when it cannot.
func measureTax(ctx context.Context, a *agent.Agent, w io.Writer) {
	raiseMemlock()
	if _, err := a.CalibrateOneShotStats(ctx); err != nil && w != nil {
		fmt.Fprintf(w, "stats tax not measured: %v\n", err)
	}
}

// statsTaxOnly measures the stats cost per run of no-op xdp and tc
// programs (BPF_PROG_TEST_RUN, nothing attached) when --calibrate is off:
// every node gets a tax figure; tracing programs take the xdp figure.
func statsTaxOnly(ctx context.Context, a *agent.Agent, log *slog.Logger) {
	costs, err := a.CalibrateStats(ctx, nil)
	if err != nil && ctx.Err() == nil {
		log.Warn("stats tax not measured", "err", err)
		return
	}
	for _, c := range costs {
		if c.Measured {
			log.Info("stats cost per run", "kind", c.Kind, "ns", c.TaxNs)
		} else {
			log.Info("stats cost per run", "kind", c.Kind, "reason", c.Reason)
		}
	}
}

// taxLine says what stats accounting costs the node, for top's header and
// list's footer.
func taxLine(s *agent.Snapshot) string {
	t := s.StatsTax
	if !t.Known {
		if t.Reason == "" {
			return "stats tax n/a"
		}
		return "stats tax: " + t.Reason
	}
	mode := string(s.Stats.Mode)
	if s.Stats.Mode == agent.StatsSampled && s.Stats.Period > 0 {
		mode = fmt.Sprintf("sampled %s/%s", s.Stats.Window, s.Stats.Period)
	}
	switch s.Stats.Mode {
	case agent.StatsOff:
		return "stats off (" + t.Reason + ")"
	case "":
		return "stats tax if always on: " + fmtShare(t.AlwaysCPUShare) + " CPU (from runs since load, which count only while stats are on)"
	}
	line := "stats " + mode + ": tax " + fmtShare(t.CPUShare) + " CPU"
	if t.Duty < 1 {
		line += " (always-on " + fmtShare(t.AlwaysCPUShare) + ")"
	}
	if t.RatesSince == "load" {
		line += ", runs since load"
	}
	return line
}

func agentCPULine(s *agent.Snapshot) string {
	if s.Interval <= 0 {
		return "bpfleet CPU n/a in one scan"
	}
	return "bpfleet " + fmtShare(s.AgentCPUShare) + " CPU"
}

// fmtShare prints a fraction of one CPU as a percentage with enough digits
// for the small shares a tax usually is.
func fmtShare(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.0001:
		return strconv.FormatFloat(f*100, 'f', 5, 64) + "%"
	case f < 0.01:
		return strconv.FormatFloat(f*100, 'f', 3, 64) + "%"
	}
	return strconv.FormatFloat(f*100, 'f', 2, 64) + "%"
}

// profilePanel lists the programs chosen by --profile with their interval
// percentiles (fentry/fexit profiler), after top's attach-type panel.
func profilePanel(s *agent.Snapshot) []string {
	var out []string
	for i := range s.Programs {
		p := s.Programs[i]
		if p.Profile == nil {
			continue
		}
		if out == nil {
			out = append(out, fmt.Sprintf("%-24s %11s %9s %9s %9s %9s %12s", "PROFILED (fentry/fexit)", "RUNS/S", "P50 NS", "P90 NS", "P99 NS", "MEAN NS", "MAX NS"))
		}
		name := trunc(strconv.FormatUint(uint64(p.ID), 10)+" "+p.Name, 24)
		if p.Profile.Error != "" {
			out = append(out, fmt.Sprintf("%-24s %s", name, p.Profile.Error))
			continue
		}
		rate := 0.0
		if s.Interval > 0 {
			rate = float64(p.Profile.IntervalRuns) / s.Interval.Seconds()
		}
		out = append(out, fmt.Sprintf("%-24s %11s %9.0f %9.0f %9.0f %9.0f %12d", name, fmtRate(rate),
			p.Profile.P50Ns, p.Profile.P90Ns, p.Profile.P99Ns, p.Profile.MeanNs, p.Profile.MaxNs))
	}
	return out
}
