package archcheck

import (
	"strings"
	"testing"
)

// TestRulesCatch holds the rules to imports planted against each of them, and
// to the tree's own legal shapes, so a rule that stops matching fails here.
func TestRulesCatch(t *testing.T) {
	for _, c := range []struct {
		p    pkg
		want string // "" when the imports are legal
	}{
		{pkg{"agent", []string{"agent/owners", "probes/progiter", "internal/config"}}, ""},
		{pkg{"agent", []string{"exporter"}}, "agent never imports"},
		{pkg{"agent/history", []string{"api"}}, "agent never imports"},
		{pkg{"exporter", []string{"agent", "exporter/otlp"}}, ""},
		{pkg{"exporter", []string{"api"}}, "exporter never imports"},
		{pkg{"exporter/dashboards", []string{"probes/catalog"}}, "exporter never imports"},
		{pkg{"api", []string{"agent/history", "internal/apiconst"}}, ""},
		{pkg{"api", []string{"exporter"}}, "api never imports"},
		{pkg{"exporter/otlp", []string{"agent"}}, "exporter/otlp imports nothing"},
		{pkg{"probes/bench", []string{"probes/catalog", "internal/sysfile"}}, ""},
		{pkg{"probes/progiter", []string{"agent/owners"}}, "probes import nothing"},
		{pkg{"agent/internal/reader", []string{"agent/internal/prog", "agent/owners", "probes/progstats"}}, ""},
		{pkg{"agent/internal/reader", []string{"agent/internal/stats"}}, "the reader imports neither"},
		{pkg{"internal/config", []string{"probes/catalog"}}, "internal/config is a leaf"},
		{pkg{"cmd/bpfleet", []string{"internal/syncbuf"}}, "no product package imports"},
		{pkg{"agent", []string{"exporter/internal/faultaddr"}}, "no product package imports"},
		{pkg{"test/backends", []string{"internal/syncbuf"}}, ""},
		{pkg{"exporter/dashboards", []string{"exporter", "internal/fleetquery"}}, ""},
		{pkg{"exporter", []string{"internal/fleetquery"}}, "exporter imports agent"},
		{pkg{"exporter/dashboards", []string{"agent/history"}}, "exporter/dashboards imports exporter"},
		{pkg{"internal/fleetquery", []string{"internal/config"}}, "internal/fleetquery is a leaf"},
	} {
		got := strings.Join(importFaults([]pkg{c.p}), "\n")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s importing %v: got %q, want %q", c.p.Path, c.p.Imports, got, c.want)
		}
	}
	if got := leanFaults([]string{"agent", "agent/history", "internal/config"}); len(got) != 0 {
		t.Errorf("lean build of agent, agent/history, internal/config: got %q, want none", got)
	}
	if got := leanFaults([]string{"agent", "agent/kube"}); len(got) != 1 {
		t.Errorf("lean build linking agent/kube: got %q, want one fault", got)
	}
}
