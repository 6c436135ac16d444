package agent

import (
	"strings"
	"testing"
)

func TestParseAppArmorLabel(t *testing.T) {
	for _, c := range []struct {
		label, profile, mode string
		ok                   bool
	}{
		{"unconfined", "unconfined", "", true},
		{"cri-containerd.apparmor.d (enforce)", "cri-containerd.apparmor.d", "enforce", true},
		{"docker-default (complain)", "docker-default", "complain", true},
		{"/usr/bin/bpfleet (kill)", "/usr/bin/bpfleet", "kill", true},
		{"a//&b (enforce)", "a//&b", "enforce", true},
		// SELinux contexts in attr/current are no AppArmor labels.
		{"system_u:system_r:spc_t:s0", "", "", false},
		{"system_u:system_r:container_t:s0:c1,c2", "", "", false},
		{"", "", "", false},
		{"x ()", "", "", false},
		{" (enforce)", "", "", false},
	} {
		p, m, ok := parseAppArmorLabel(c.label)
		if p != c.profile || m != c.mode || ok != c.ok {
			t.Errorf("parseAppArmorLabel(%q) = %q, %q, %v; want %q, %q, %v", c.label, p, m, ok, c.profile, c.mode, c.ok)
		}
	}
}

func TestConfinementLine(t *testing.T) {
	lost := []string{FeatureOwners, FeatureNetdevAttach, FeatureStats, FeatureNetdevPods}
	for _, c := range []struct {
		label string
		lost  []string
		want  []string // substrings; nil: no line
	}{
		{"unconfined", lost, nil},
		{"", lost, nil},
		{"system_u:system_r:container_t:s0", lost, nil},
		{"cri-containerd.apparmor.d (complain)", lost, nil},
		{"cri-containerd.apparmor.d (enforce)", nil, nil},
		// stats is not a loss AppArmor causes: bpf() is not mediated.
		{"cri-containerd.apparmor.d (enforce)", []string{FeatureStats}, nil},
		{"cri-containerd.apparmor.d (enforce)", lost, []string{
			"AppArmor profile cri-containerd.apparmor.d (enforce)",
			"lost: owners, interface attachments, interface pods;", "Unconfined"}},
		{"bpfleet (kill)", []string{FeaturePins}, []string{"AppArmor profile bpfleet (kill)", "lost: pins;"}},
	} {
		got := confinementLine(c.label, c.lost)
		if c.want == nil {
			if got != "" {
				t.Errorf("confinementLine(%q, %q) = %q, want none", c.label, c.lost, got)
			}
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("confinementLine(%q, %q) = %q, want it to say %q", c.label, c.lost, got, w)
			}
		}
		if strings.Contains(got, FeatureStats) {
			t.Errorf("confinementLine names stats, which AppArmor does not refuse: %q", got)
		}
	}
}
