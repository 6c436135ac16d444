package exporter

import (
	"fmt"
	"slices"
	"strings"
)

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

// prometheusName is the name Prometheus' OTLP receiver gives the metric
// with its default translation (underscores, unit suffix, _total on
// counters, _ratio on gauges of unit 1); exporter/e2e checks these against
// a real Prometheus.
func (d metricDef) prometheusName() string {
	n := strings.ReplaceAll(d.Name, ".", "_")
	switch {
	case d.Unit == "s":
		n += "_seconds"
	case d.Unit == "By":
		n += "_bytes"
	case d.Unit == "1" && d.Kind == kindGauge:
		n += "_ratio"
	}
	if d.Kind == kindCounter {
		n += "_total"
	}
	return n
}

// PrometheusNames returns the Prometheus names of the metrics exported at
// level l (a histogram by its _count series).
func PrometheusNames(l Level) []string {
	var out []string
	for _, d := range metricDefs {
		if !slices.Contains(d.Levels, l) {
			continue
		}
		n := d.prometheusName()
		if d.Kind == kindHistogram {
			n += "_count"
		}
		out = append(out, n)
	}
	return out
}

// PrometheusLabels returns the labels Prometheus' OTLP receiver gives the
// attributes of the metric the table calls name at level l (dots become
// underscores): the closed set a backend test holds a series to.
func PrometheusLabels(name string, l Level) ([]string, error) {
	for _, d := range metricDefs {
		if d.Name != name || !slices.Contains(d.Levels, l) {
			continue
		}
		out := make([]string, len(d.Attrs))
		for i, a := range d.Attrs {
			out[i] = strings.ReplaceAll(a, ".", "_")
		}
		return out, nil
	}
	return nil, fmt.Errorf("metric %s at level %v is not in exporter's metrics table", name, l)
}
