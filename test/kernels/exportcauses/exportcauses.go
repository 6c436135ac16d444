// Package exportcauses is the guest half of exporter/e2e's
// TestGuestMissCauses: in a kernel-matrix guest whose kernel lets the miss
// watcher explain misses (the host's often refuses hardware watchpoints),
// the real bpfleet agent watches the recursion canary and exports the
// misses' causes over OTLP/HTTP to backends on the host, which the host
// half queries. Without the endpoints its test skips: the matrix runs it
// only when that test asks. This file holds what both halves name.
package exportcauses

// The environment the host half passes through the harness (-env).
const (
	MetricsEnv = "BPFLEET_GUEST_METRICS_ENDPOINT" // OTLP/HTTP metrics URL
	TracesEnv  = "BPFLEET_GUEST_TRACES_ENDPOINT"  // OTLP/HTTP traces URL
)

// Provoked is how many recursion misses the test makes while the watcher
// watches the canary: under the watcher's default budget (64 samples per
// CPU per interval), so every one is sampled and explained.
const Provoked = 20

// MetricPrefix starts the names of the "metric name=value" lines the guest
// logs for the host half: program_id, instance (the agent's
// service.instance.id), os_version, provoked and kernel_misses.
const MetricPrefix = "exportcauses."
