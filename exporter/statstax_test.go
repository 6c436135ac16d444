package exporter

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// The stats mode shapes the run metrics: present with always and sampled,
// with the same attributes whether the interval's counts are exact or
// scaled (bpf.agent.stats.exact says which), absent with off, while misses
// stay as they are in every mode; the tax rows carry the snapshot's figures.
func TestStatsModeShapesRunMetrics(t *testing.T) {
	for _, c := range []struct {
		mode   agent.StatsMode
		counts string
	}{
		{agent.StatsAlways, agent.CountsExact}, {agent.StatsSampled, agent.CountsSampled}, {agent.StatsSampled, agent.CountsExact}, {agent.StatsOff, ""},
	} {
		mode := c.mode
		t.Run(string(mode)+" "+c.counts, func(t *testing.T) {
			e, r, _ := newTestExporter(t, Config{Level: LevelProgram})
			s := snapshot(1, prog(42, 2_500_000_000, u64(17)))
			s.Stats.Mode, s.Stats.Counts = mode, c.counts
			s.AgentCPUShare = 0.0012
			s.StatsTax = agent.StatsTax{Known: true, Duty: 0.1, CPUShare: 0.008, AlwaysCPUShare: 0.08,
				ByProgramType: []agent.ProgramTypeTax{{ProgramType: "xdp", CPUShare: 0.008}}}
			s.StatsCosts = []agent.StatsCost{{Kind: "xdp", Measured: true, TaxNs: 75}, {Kind: "fentry", Reason: "load: operation not permitted"}}
			s.AttachTypes = []agent.AttachTypeStat{{AttachType: "xdp", Programs: 1, Delta: agent.Rates{Runs: 5}}}
			e.Update(context.Background(), s)
			got, _ := collect(t, r)
			id := attribute.Int64Value(42)
			for _, n := range runMetrics {
				if !contains(LevelProgram, n) {
					continue
				}
				pts := got[n]
				switch mode {
				case agent.StatsOff:
					if len(pts) != 0 {
						t.Errorf("%s: %d series with stats off, want none", n, len(pts))
					}
				default:
					if len(pts) == 0 {
						t.Fatalf("%s: no series", n)
					}
					for _, p := range pts {
						if v, ok := p.attrs.Value("bpf.stats.mode"); ok {
							t.Errorf("%s: bpf.stats.mode=%s on a run series in mode %s: its attributes would change with the counts", n, v.AsString(), mode)
						}
					}
				}
			}
			switch pts := got["bpf.agent.stats.exact"]; {
			case mode == agent.StatsOff && len(pts) != 0:
				t.Errorf("stats.exact = %v with stats off, want absent", pts)
			case mode != agent.StatsOff && (len(pts) != 1 || (pts[0].value == 1) != (c.counts == agent.CountsExact)):
				t.Errorf("stats.exact = %v for counts %q", pts, c.counts)
			}
			if v := value(t, got["bpf.program.recursion_misses"], "bpf.program.id", id); v != 17 {
				t.Errorf("recursion_misses = %v in mode %s, want 17", v, mode)
			}
			if v := value(t, got["bpf.agent.stats.mode"], "bpf.stats.mode", attribute.StringValue(string(mode))); v != 1 {
				t.Errorf("stats.mode = %v", v)
			}
			if pts := got["bpf.agent.stats.tax"]; len(pts) != 1 || pts[0].value != 0.008 {
				t.Errorf("stats.tax = %v, want 0.008", pts)
			}
			if v := value(t, got["bpf.program_type.stats.tax"], "bpf.program.type", attribute.StringValue("xdp")); v != 0.008 {
				t.Errorf("program_type.stats.tax = %v", v)
			}
			if pts := got["bpf.agent.stats.cost"]; len(pts) != 1 || pts[0].value != 75e-9 {
				t.Errorf("stats.cost = %v, want one series of 75 ns (fentry was not measured)", pts)
			}
			if pts := got["bpf.agent.cpu"]; len(pts) != 1 || pts[0].value != 0.0012 {
				t.Errorf("agent.cpu = %v", pts)
			}
		})
	}
}

// An unknown tax (stats held elsewhere) is absent, not zero.
func TestUnknownTaxIsAbsent(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelAttachType})
	s := snapshot(1)
	s.Stats.Mode = agent.StatsAlways
	s.StatsTax = agent.StatsTax{Reason: "not measurable: stats held elsewhere"}
	e.Update(context.Background(), s)
	got, _ := collect(t, r)
	if pts := got["bpf.agent.stats.tax"]; len(pts) != 0 {
		t.Errorf("stats.tax = %v, want absent", pts)
	}
}

// runMetrics are the series that exist only while stats count runs.
var runMetrics = []string{
	"bpf.program.run.count", "bpf.program.run.time",
	"bpf.owner.run.count", "bpf.owner.run.time",
	"bpf.attach_type.run.count", "bpf.attach_type.run.time",
}

func contains(l Level, name string) bool {
	for _, d := range metricDefs {
		if d.Name == name {
			for _, x := range d.Levels {
				if x == l {
					return true
				}
			}
		}
	}
	return false
}
