package config

import (
	"strings"
	"testing"
	"time"
)

// FuzzAgentConfig throws arbitrary flag strings and OTEL_* values at the
// agent's configuration. Whatever arrives: no panic, and the answer is
// either valid settings or usage errors, each one line that names a flag
// or variable.
func FuzzAgentConfig(f *testing.F) {
	for _, s := range [][5]string{
		{"http://collector:4318", "", "Authorization=Bearer%20x", "k8s.cluster.name=prod", "1000"},
		{"collector:4317", "grpc", "a=b,c=d", "", ""},
		{"not a url", "http/json", "garbage", "=x", "abc"},
		{"http://[::1]:4318/otlp", "http/protobuf", "a=%zz", "a=%2C,b", "-5"},
		{"https://user@h:99999?q#f", "udp", ",", ",,", "99999999999999999999"},
		{"", "", "x y=1", "k=v\n", "0"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], "otlp", "500ms", "0.0.0.0:9808")
	}
	f.Fuzz(func(t *testing.T, endpoint, protocol, headers, resource, interval, exporter, flagInterval, apiAddr string) {
		c := DefaultAgent()
		c.ClusterName = ""
		c.OTLPEndpoint, c.OTLPProtocol, c.APIAddr = endpoint, protocol, apiAddr
		if d, err := time.ParseDuration(flagInterval); err == nil {
			c.Interval = d
		}
		env := MapEnv(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT":         endpoint,
			"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": headers,
			"OTEL_EXPORTER_OTLP_HEADERS":          headers,
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":  protocol,
			"OTEL_RESOURCE_ATTRIBUTES":            resource,
			"OTEL_METRIC_EXPORT_INTERVAL":         interval,
			"OTEL_EXPORTER_OTLP_TIMEOUT":          interval,
			"OTEL_METRICS_EXPORTER":               exporter,
			"OTEL_TRACES_EXPORTER":                exporter,
			"OTEL_SDK_DISABLED":                   exporter,
		})
		err := c.Resolve(env)
		if err == nil {
			if c.Interval < MinScanInterval || c.EffectiveExportInterval() < MinExportInterval {
				t.Fatalf("accepted interval %v, export interval %v", c.Interval, c.EffectiveExportInterval())
			}
			for _, s := range []*Signal{&c.OTel.Metrics, &c.OTel.Traces} {
				if s.OTLP() && !strings.HasPrefix(s.Endpoint, "http://") && !strings.HasPrefix(s.Endpoint, "https://") {
					t.Fatalf("accepted endpoint %q", s.Endpoint)
				}
			}
			return
		}
		if !IsUsage(err) {
			t.Fatalf("not a usage error: %v", err)
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			name, _, ok := strings.Cut(line, "=")
			if !ok || !(strings.HasPrefix(name, "--") || strings.HasPrefix(name, "OTEL_") || strings.HasPrefix(name, "BPFLEET_")) {
				t.Fatalf("line does not start with a flag or variable: %q", line)
			}
		}
	})
}
