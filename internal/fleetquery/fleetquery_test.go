package fleetquery_test

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/exporter"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

// TestNames: every metric the questions read is the exporter's, by the
// name Prometheus' OTLP receiver gives it (METRICS.md's table).
func TestNames(t *testing.T) {
	for prom, otel := range fq.OTelNames {
		got, err := exporter.PrometheusName(otel)
		if err != nil || got != prom {
			t.Errorf("%s: the exporter's %s is %q (%v)", prom, otel, got, err)
		}
	}
}

var params = fq.Params{Sel: fq.JobSel("bpfleet-agent"), Range: "1h", RangeSeconds: "3600", Window: "5m", Step: "30s", Pool: "pool_x"}

// pure is params as the CLI asks a store that answered fq.MetricsQLProbe.
var pure = func() fq.Params { p := params; p.MissIncrease = fq.IncreasePure; return p }()

// TestQueriesSelectAgents: every question reads only the agents' series
// (each selector carries the job matcher), over the range or window it
// is given, with nothing left unset.
func TestQueriesSelectAgents(t *testing.T) {
	all := params.Queries()
	for name, q := range pure.Queries() {
		all[name+" (MetricsQL)"] = q
	}
	for name, q := range all {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, m := range append(slices.Collect(maps.Keys(fq.OTelNames)), fq.TargetInfo) {
				for _, at := range regexp.MustCompile(`\b`+m+`\b`).FindAllStringIndex(q, -1) {
					n++
					if !strings.HasPrefix(q[at[1]:], "{"+params.Sel) {
						t.Errorf("%s read without the job matcher: %s", m, q)
					}
				}
			}
			if n == 0 {
				t.Fatalf("reads no metric of ours: %s", q)
			}
			// Top's node count is of now: the store's lookback.
			if !strings.Contains(q, "[1h") && !strings.Contains(q, "[5m]") && !strings.HasPrefix(name, "top nodes") {
				t.Errorf("neither the range nor the window: %s", q)
			}
			if strings.Count(q, "(") != strings.Count(q, ")") || strings.Count(q, "[") != strings.Count(q, "]") {
				t.Errorf("unbalanced: %s", q)
			}
		})
	}
}

// TestQueriesKeys: what each answer is keyed by, as the CLI reads it.
func TestQueriesKeys(t *testing.T) {
	for _, tc := range []struct {
		name, q string
		want    []string
	}{
		{"top cpu by program", params.TopCPU(), []string{"sum by (bpf_program_name, bpf_attach_type)", "increase(bpf_program_run_time_seconds_total{", "[1h])) / 3600"}},
		{"worst node per program", params.TopWorst(), []string{"topk by (bpf_program_name, bpf_attach_type) (1,", "sum by (instance, bpf_program_name, bpf_attach_type)"}},
		{"misses per node and cause", params.MissesByNode(), []string{"by (instance, bpf_program_name, bpf_attach_type, bpf_miss_cause,", "k8s_pod_name", ") > 0"}},
		{"since: a window sliding at the step", params.MissesSince(), []string{"increase(bpf_program_recursion_misses_total{job=~\"bpfleet-agent\"}[5m])", "[1h:30s]", "min_over_time(timestamp("}},
		{"since, narrowed to the programs that missed", params.MissesSince("a.b", "c"), []string{`bpf_program_recursion_misses_total{job=~"bpfleet-agent", bpf_program_name=~"a\\.b|c"}[5m]`}},
		{"overhead with the node's kernel and pool", params.OverheadByNode(), []string{"group_left (os_version, pool_x)", "by (job, instance, os_version, pool_x)", "topk by (job, instance) (1,"}},
		{"node facts fall back to the agent's labels", params.NodeInfo(), []string{"target_info{", "or on (job, instance)", "bpf_agent_scans_total{"}},
		{"the dashboard's median", params.OverheadMedian(), []string{"quantile by (bpf_attach_type, os_version, pool_x) (0.5, " + params.OverheadByNode() + ")"}},
		{"MetricsQL: misses from a new series' zero", pure.MissesByNode(), []string{`increase_pure(bpf_program_recursion_misses_total{job=~"bpfleet-agent"}[1h])`}},
		{"MetricsQL: top misses too", pure.TopMisses(), []string{`(increase_pure(bpf_program_recursion_misses_total{`}},
		{"MetricsQL: since too", pure.MissesSince(), []string{`(increase_pure(bpf_program_recursion_misses_total{job=~"bpfleet-agent"}[5m])`}},
		{"MetricsQL: run time keeps increase()", pure.TopCPU(), []string{` (increase(bpf_program_run_time_seconds_total{`}},
		{"stats off but by choice", params.StatsOff(), []string{"== 0 unless on (job, instance)", `bpf_stats_mode="off"`}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(tc.q, w) {
				t.Errorf("%s: %q not in %s", tc.name, w, tc.q)
			}
		}
	}
}
