package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The parsing and checking of single OTEL_* values: what ResolveOTel
// (otel.go) reads each variable with, and the variables checked by value
// alone (envChecks).

type setVar struct{ name, value string }

// firstSet returns the first of names that is set.
func firstSet(get func(string) string, names ...string) setVar {
	for _, n := range names {
		if v := get(n); v != "" {
			return setVar{n, v}
		}
	}
	return setVar{}
}

func checkProtocol(p string) string {
	switch Protocol(p) {
	case ProtocolGRPC, ProtocolHTTP:
		return ""
	case "http/json":
		return "OTLP over http/json is not supported by the Go SDK: want grpc or http/protobuf"
	}
	return "want grpc or http/protobuf"
}

// parseEndpoint checks an OTLP endpoint: an http:// or https:// URL with
// a host, or, for gRPC, also a bare host:port (given http:// here, as the
// OTel spec's insecure default for a scheme-less gRPC endpoint is not
// what the Go SDK does; say https:// for TLS).
func parseEndpoint(v string, grpc bool) (string, error) {
	if grpc && !strings.Contains(v, "://") {
		host, port, err := net.SplitHostPort(v)
		if err != nil || host == "" || !validPort(port) {
			return "", errors.New("want a URL such as http://collector:4317, or host:port for grpc")
		}
		return "http://" + v, nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", errors.New("not a URL: want e.g. http://collector:4318")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("scheme %s: want http:// or https://, e.g. http://collector:4318", quote(u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", errors.New("no host: want e.g. http://collector:4318")
	}
	if p := u.Port(); p != "" && !validPort(p) {
		return "", fmt.Errorf("port %s: want a number from 1 to 65535", quote(p))
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("want a URL without user, query or fragment, e.g. http://collector:4318")
	}
	return v, nil
}

func validPort(p string) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && n > 0
}

// parseKV parses the W3C-baggage-like lists of OTEL_EXPORTER_OTLP_HEADERS
// and OTEL_RESOURCE_ATTRIBUTES: key=value pairs separated by commas, values
// URL-encoded. headers says keys must be HTTP header names.
func parseKV(s string, headers bool) (map[string]string, error) {
	kv := map[string]string{}
	for i, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("item %d %s has no '='", i+1, quote(item))
		}
		if k == "" {
			return nil, fmt.Errorf("item %d has an empty key", i+1)
		}
		if headers && !isToken(k) {
			return nil, fmt.Errorf("item %d: %s is not an HTTP header name", i+1, quote(k))
		}
		if _, err := url.PathUnescape(k); err != nil {
			return nil, fmt.Errorf("item %d: key %s is not URL-encoded correctly", i+1, quote(k))
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("item %d: value of %s is not URL-encoded correctly", i+1, quote(k))
		}
		if headers && strings.ContainsAny(val, "\r\n\x00") {
			return nil, fmt.Errorf("item %d: value of %s has a line break or NUL", i+1, quote(k))
		}
		kv[k] = val
	}
	return kv, nil
}

// isToken reports whether s is an RFC 9110 token (a header field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= 0x20 || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

// envCheck checks one variable's value: "" when valid, else what is
// accepted.
type envCheck struct {
	name  string
	check func(string) string
}

func oneOf(vals ...string) func(string) string {
	return func(v string) string {
		if slices.Contains(vals, v) {
			return ""
		}
		return "want " + strings.Join(vals[:len(vals)-1], ", ") + " or " + vals[len(vals)-1]
	}
}

func intAtLeast(min int64, unit string) func(string) string {
	return func(v string) string {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= min {
			return ""
		}
		return fmt.Sprintf("want a whole number%s of at least %d", unit, min)
	}
}

func portCheck(v string) string {
	if n, err := strconv.ParseUint(v, 10, 16); err != nil || n > 65535 {
		return "want a port number from 0 to 65535"
	}
	return ""
}

func anyInt(v string) string {
	if _, err := strconv.ParseInt(v, 10, 32); err != nil {
		return "want a whole number (negative: no limit)"
	}
	return ""
}

func readableFile(v string) string {
	f, err := os.Open(v)
	if err != nil {
		return statReason(err) + ": want a readable PEM file"
	}
	f.Close()
	return ""
}

func headersCheck(v string) string {
	if _, err := parseKV(v, true); err != nil {
		return err.Error() + ": want name=value,name=value with values URL-encoded (%2C for a comma)"
	}
	return ""
}

func timeoutCheck(v string) string {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 && n <= int64(24*time.Hour/time.Millisecond) {
		return ""
	}
	return "want a whole number of milliseconds from 1 to 86400000"
}

func temporalityCheck(v string) string {
	switch strings.ToLower(v) {
	case "cumulative":
		return ""
	case "delta", "lowmemory":
		return "bpfleet exports cumulative sums only (the kernel's counters are cumulative, and Prometheus' OTLP receiver takes cumulative only): unset it or want cumulative"
	}
	return "want cumulative"
}

func samplerArgCheck(v string) string {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
		return ""
	}
	return "want a ratio from 0 to 1"
}

// envChecks are the variables checked by value alone. Endpoints, protocols,
// exporters, intervals and resource attributes are parsed in resolve.
var envChecks = func() []envCheck {
	c := []envCheck{
		{"OTEL_BSP_SCHEDULE_DELAY", intAtLeast(0, " of milliseconds")},
		{"OTEL_BSP_EXPORT_TIMEOUT", intAtLeast(0, " of milliseconds")},
		{"OTEL_BSP_MAX_QUEUE_SIZE", intAtLeast(1, "")},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", intAtLeast(1, "")},
		{"OTEL_TRACES_SAMPLER", oneOf("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio")},
		{"OTEL_TRACES_SAMPLER_ARG", samplerArgCheck},
		{"OTEL_METRICS_EXEMPLAR_FILTER", oneOf("always_on", "always_off", "trace_based")},
		{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", temporalityCheck},
		{"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", oneOf("explicit_bucket_histogram", "base2_exponential_bucket_histogram")},
		// Where OTEL_METRICS_EXPORTER=prometheus listens (0: any free port).
		{"OTEL_EXPORTER_PROMETHEUS_PORT", portCheck},
	}
	for _, n := range []string{"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
		"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
		"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"} {
		c = append(c, envCheck{n, anyInt})
	}
	for _, sig := range []string{"", "METRICS_", "TRACES_"} {
		p := "OTEL_EXPORTER_OTLP_" + sig
		c = append(c,
			envCheck{p + "HEADERS", headersCheck},
			envCheck{p + "TIMEOUT", timeoutCheck},
			envCheck{p + "COMPRESSION", oneOf(string(CompressionGzip), string(CompressionNone))},
			envCheck{p + "INSECURE", oneOf("true", "false")},
			envCheck{p + "CERTIFICATE", readableFile},
			envCheck{p + "CLIENT_CERTIFICATE", readableFile},
			envCheck{p + "CLIENT_KEY", readableFile},
		)
	}
	return c
}()
