package chart

import (
	"testing"
)

// The prometheus-operator CRD types, reduced to the fields the chart sets;
// decoded strictly like the core types, so a field the chart renders that
// is not here (or misspelt) fails the test.
type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

type serviceMonitor struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
				Replacement  string   `json:"replacement"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type promRule struct {
	Alert         string            `json:"alert"`
	Record        string            `json:"record"`
	Expr          string            `json:"expr"`
	For           string            `json:"for"`
	KeepFiringFor string            `json:"keep_firing_for"`
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations"`
}

type prometheusRule struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   objectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string     `json:"name"`
			Interval string     `json:"interval"`
			Rules    []promRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// checkRules: the PrometheusRule carries the rule file's groups verbatim,
// with Prometheus templates ({{ $labels.x }}) left for Prometheus.
func checkRules(t *testing.T, pr *prometheusRule) {
	t.Helper()
	if pr == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("PrometheusRule = %+v", pr)
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if r.Expr == "" || (r.Alert == "") == (r.Record == "") {
				t.Errorf("group %s: rule %+v needs an expr and exactly one of alert/record", g.Name, r)
			}
		}
	}
	if n == 0 {
		t.Error("PrometheusRule has no rules")
	}
}
