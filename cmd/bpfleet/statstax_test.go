package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

func TestTaxLineAndProfilePanel(t *testing.T) {
	s := &agent.Snapshot{Interval: 10 * time.Second, AgentCPUShare: 0.0012,
		Stats:    agent.StatsState{Mode: agent.StatsSampled, Window: time.Second, Period: 10 * time.Second},
		StatsTax: agent.StatsTax{Known: true, Duty: 0.1, CPUShare: 0.008, AlwaysCPUShare: 0.08}}
	for _, want := range []string{"sampled 1s/10s", "tax 0.800% CPU", "always-on 8.00%"} {
		if l := taxLine(s); !strings.Contains(l, want) {
			t.Errorf("tax line %q lacks %q", l, want)
		}
	}
	if l := agentCPULine(s); !strings.Contains(l, "0.120% CPU") {
		t.Errorf("agent line %q", l)
	}
	s.StatsTax = agent.StatsTax{Reason: "not measurable: stats held elsewhere"}
	if l := taxLine(s); !strings.Contains(l, "not measurable: stats held elsewhere") {
		t.Errorf("tax line %q", l)
	}
	if len(profilePanel(s)) != 0 {
		t.Error("profile panel without profiled programs")
	}
	s.Programs = []*agent.ProgramStat{
		{Program: agent.Program{ID: 7, Name: "fw"}, Profile: &agent.ProfileStat{IntervalRuns: 1000, P50Ns: 300, P90Ns: 900, P99Ns: 4000, MaxNs: 9000}},
		{Program: agent.Program{ID: 8, Name: "nobtf"}, Profile: &agent.ProfileStat{Error: "cannot profile program 8 (nobtf): no BTF"}},
		{Program: agent.Program{ID: 9, Name: "other"}},
	}
	p := profilePanel(s)
	if len(p) != 3 || !strings.Contains(p[1], "100.0") || !strings.Contains(p[1], "4000") || !strings.Contains(p[2], "no BTF") {
		t.Errorf("profile panel:\n%s", strings.Join(p, "\n"))
	}
}
