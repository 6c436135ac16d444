package exporter

import "fmt"

// PrometheusName returns the Prometheus name of the metric the table calls
// name (e.g. bpf.program.recursion_misses → bpf_program_recursion_misses_total),
// for code that writes PromQL against bpfleet's metrics (the dashboards):
// a metric renamed or dropped from the table is an error there, not a
// panel that silently shows nothing.
func PrometheusName(name string) (string, error) {
	for _, d := range metricDefs {
		if d.Name == name {
			return d.prometheusName(), nil
		}
	}
	return "", fmt.Errorf("metric %s is not in exporter's metrics table", name)
}
