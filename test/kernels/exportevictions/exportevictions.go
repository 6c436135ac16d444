// Package exportevictions is the guest half of exporter/e2e's
// TestGuestMapEvictions: the host's kernel may refuse the agent's fexit
// probes (then the map-pressure series are absent there), so in a
// kernel-matrix guest whose kernel allows them the real bpfleet agent
// counts an LRU map's evictions and a full hash map's refused updates and
// exports them over OTLP/HTTP to a Prometheus on the host, which the host
// half queries. Without the endpoint its test skips: the matrix runs it
// only when that test asks. This file holds what both halves name.
package exportevictions

// MetricsEnv is the OTLP/HTTP metrics URL the host half passes through the
// harness (-env).
const MetricsEnv = "BPFLEET_GUEST_METRICS_ENDPOINT"

// The maps the guest fills: an LRU hash of LRUSize entries given LRUKeys
// distinct keys from user space (it must evict), and a plain hash of
// HashSize given HashKeys (it refuses HashKeys-HashSize updates: E2BIG).
const (
	LRUName  = "e2e_evict_lru"
	LRUSize  = 1000
	LRUKeys  = 5000
	HashName = "e2e_refuse_h"
	HashSize = 64
	HashKeys = 100
)

// MetricPrefix starts the names of the "metric name=value" lines the guest
// logs for the host half: instance (the agent's service.instance.id),
// os_version, lru_id and hash_id (the maps' ids), lru_kept (the LRU map's
// entries after the fill, by walking it), evicted (the kernel's answer:
// keys put minus keys kept) and refused (the updates the kernel refused
// its caller with E2BIG).
const MetricPrefix = "exportevictions."
