package e2e

import (
	"testing"

	"github.com/bpfleet/bpfleet/internal/config"
)

// metricsTo is the OpenTelemetry settings of an in-process exporter that
// sends its metrics over OTLP/HTTP to the base URL endpoint and no spans,
// resolved by internal/config as the agent resolves --otlp-endpoint and
// OTEL_TRACES_EXPORTER=none: the exporter reads no environment, so the
// test's environment cannot change where the metrics go.
func metricsTo(t testing.TB, endpoint string) config.OTel {
	t.Helper()
	o, err := config.ResolveOTel(config.MapEnv(map[string]string{"OTEL_TRACES_EXPORTER": "none"}), endpoint, string(config.ProtocolHTTP))
	if err != nil {
		t.Fatal(err)
	}
	return o
}
