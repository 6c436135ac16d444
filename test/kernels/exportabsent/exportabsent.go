// Package exportabsent is the guest half of exporter/e2e's
// TestGuestAbsentFigures: on the matrix's oldest kernel (5.10, which counts
// no recursion misses and makes no perf_event links) the real bpfleet agent
// exports a node's programs over OTLP/HTTP to a Prometheus on the host that
// evaluates the shipped alert rules; the host half checks that what the
// kernel lacks has no series and that no rule fires. Without the endpoint
// its test skips: the matrix runs it only when that test asks. This file
// holds what both halves name.
package exportabsent

// MetricsEnv is the OTLP/HTTP metrics URL the host half passes through the
// harness (-env).
const MetricsEnv = "BPFLEET_GUEST_METRICS_ENDPOINT"

// MetricPrefix starts the names of the "metric name=value" lines the guest
// logs for the host half: instance (the agent's service.instance.id),
// tracepoint_id and kprobe_id (the programs it loaded), os_version,
// scans (how many scans the agent had made when it stopped), attach_types
// and owners (the aggregates it found with recursion_misses null).
const MetricPrefix = "exportabsent."
