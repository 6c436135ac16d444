package otlp

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// TestWireEncoding decodes what the wire exporter writes with the OTLP
// project's generated protobuf types and checks every field it carries:
// the encoder is hand-written, so the reference decoder is the judge.
func TestWireEncoding(t *testing.T) {
	t0 := time.Unix(1700000000, 123)
	t1 := t0.Add(10 * time.Second)
	prog := attribute.NewSet(attribute.String("bpf.program.name", "flt_0001"), attribute.Int64("bpf.program.id", 42),
		attribute.Bool("bpf.program.sleepable", true), attribute.Float64("f", 1.5), attribute.StringSlice("ss", []string{"a", "b"}))
	rm := &metricdata.ResourceMetrics{
		Resource: resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "bpfleet-agent"), attribute.String("k8s.node.name", "n1")),
		ScopeMetrics: []metricdata.ScopeMetrics{{
			Scope: instrumentation.Scope{Name: "github.com/bpfleet/bpfleet/exporter", Version: "v1"},
			Metrics: []metricdata.Metrics{
				{Name: "bpf.program.run.count", Unit: "{run}", Description: "Runs.", Data: metricdata.Sum[int64]{
					Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
					DataPoints: []metricdata.DataPoint[int64]{{Attributes: prog, StartTime: t0, Time: t1, Value: 7}, {Attributes: attribute.NewSet(), Time: t1, Value: -3}},
				}},
				{Name: "bpf.program.run.time", Unit: "s", Data: metricdata.Sum[float64]{
					Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
					DataPoints: []metricdata.DataPoint[float64]{{Attributes: prog, StartTime: t0, Time: t1, Value: 0.25}},
				}},
				{Name: "bpf.agent.cpu", Data: metricdata.Gauge[float64]{DataPoints: []metricdata.DataPoint[float64]{{Time: t1, Value: 0.001}}}},
				{Name: "bpf.agent.programs", Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{{Time: t1, Value: 1000}}}},
				{Name: "empty", Data: metricdata.Gauge[int64]{}},
				{Name: "bpf.agent.scan.duration", Unit: "s", Data: metricdata.Histogram[float64]{
					Temporality: metricdata.CumulativeTemporality,
					DataPoints: []metricdata.HistogramDataPoint[float64]{{Attributes: prog, StartTime: t0, Time: t1, Count: 3, Sum: 0.006,
						Bounds: []float64{0.001, 0.01}, BucketCounts: []uint64{1, 2, 0}, Min: metricdata.NewExtrema(0.0005), Max: metricdata.NewExtrema(0.004)}},
				}},
			},
		}},
	}
	w := NewMetricExporter(MetricConfig{Headers: map[string]string{}})
	for round := range 2 { // the second from the attribute cache
		var req colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(w.encode(rm), &req); err != nil {
			t.Fatalf("round %d: the OTLP types cannot decode the request: %v", round, err)
		}
		if len(req.ResourceMetrics) != 1 {
			t.Fatalf("round %d: %d resource metrics, want 1", round, len(req.ResourceMetrics))
		}
		r := req.ResourceMetrics[0]
		if got := kvMap(r.Resource.Attributes); got["service.name"] != "bpfleet-agent" || got["k8s.node.name"] != "n1" || len(got) != 2 {
			t.Errorf("resource attributes %v", got)
		}
		if r.SchemaUrl != "https://opentelemetry.io/schemas/1.26.0" {
			t.Errorf("schema url %q", r.SchemaUrl)
		}
		sm := r.ScopeMetrics[0]
		if sm.Scope.Name != "github.com/bpfleet/bpfleet/exporter" || sm.Scope.Version != "v1" {
			t.Errorf("scope %v", sm.Scope)
		}
		if len(sm.Metrics) != 5 {
			t.Fatalf("%d metrics, want 5 (the one without points left out)", len(sm.Metrics))
		}
		m := sm.Metrics[0]
		if m.Name != "bpf.program.run.count" || m.Unit != "{run}" || m.Description != "Runs." {
			t.Errorf("metric 0: %q %q %q", m.Name, m.Unit, m.Description)
		}
		s := m.GetSum()
		if s == nil || !s.IsMonotonic || s.AggregationTemporality != 2 || len(s.DataPoints) != 2 {
			t.Fatalf("run.count sum %v", s)
		}
		p := s.DataPoints[0]
		if p.GetAsInt() != 7 || p.StartTimeUnixNano != uint64(t0.UnixNano()) || p.TimeUnixNano != uint64(t1.UnixNano()) {
			t.Errorf("point 0: %v", p)
		}
		if got := kvMap(p.Attributes); got["bpf.program.name"] != "flt_0001" || got["bpf.program.id"] != int64(42) || got["bpf.program.sleepable"] != true || got["f"] != 1.5 {
			t.Errorf("point 0 attributes %v", got)
		}
		if ss := kvArray(p.Attributes, "ss"); len(ss) != 2 || ss[0] != "a" || ss[1] != "b" {
			t.Errorf("string slice attribute %v", ss)
		}
		if q := s.DataPoints[1]; q.GetAsInt() != -3 || q.StartTimeUnixNano != 0 || len(q.Attributes) != 0 {
			t.Errorf("point 1: %v", q)
		}
		if f := sm.Metrics[1].GetSum().DataPoints[0]; f.GetAsDouble() != 0.25 {
			t.Errorf("run.time %v", f)
		}
		if g := sm.Metrics[2].GetGauge(); g == nil || g.DataPoints[0].GetAsDouble() != 0.001 || g.DataPoints[0].StartTimeUnixNano != 0 {
			t.Errorf("cpu gauge %v", g)
		}
		if g := sm.Metrics[3].GetGauge(); g == nil || g.DataPoints[0].GetAsInt() != 1000 {
			t.Errorf("programs gauge %v", g)
		}
		h := sm.Metrics[4].GetHistogram()
		if h == nil || h.AggregationTemporality != 2 || len(h.DataPoints) != 1 {
			t.Fatalf("histogram %v", h)
		}
		hp := h.DataPoints[0]
		if hp.Count != 3 || hp.GetSum() != 0.006 || hp.GetMin() != 0.0005 || hp.GetMax() != 0.004 ||
			len(hp.BucketCounts) != 3 || hp.BucketCounts[1] != 2 || len(hp.ExplicitBounds) != 2 || hp.ExplicitBounds[1] != 0.01 ||
			kvMap(hp.Attributes)["bpf.program.id"] != int64(42) || hp.StartTimeUnixNano != uint64(t0.UnixNano()) {
			t.Errorf("histogram point %v", hp)
		}
	}
	// One program gone: its cached encoding is dropped after the export
	// (keep 0), but kept while within keep: a series left out while it
	// does not move is sent again later (Config.ResendUnchanged).
	all := rm.ScopeMetrics[0].Metrics
	kept := NewMetricExporter(MetricConfig{Headers: map[string]string{}, Keep: time.Hour})
	kept.encode(rm)
	rm.ScopeMetrics[0].Metrics = all[2:]
	w.encode(rm)
	if n := len(w.attrs); n != 1 { // the empty set of the gauges
		t.Errorf("%d cached attribute sets after the program left, want 1", n)
	}
	kept.encode(rm)
	if n := len(kept.attrs); n != 2 {
		t.Errorf("%d cached attribute sets within keep after the program left, want 2", n)
	}
}

func kvMap(kvs []*commonpb.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = v.BoolValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = v.DoubleValue
		default:
			m[kv.Key] = kv.Value
		}
	}
	return m
}

func kvArray(kvs []*commonpb.KeyValue, key string) []string {
	for _, kv := range kvs {
		if kv.Key == key {
			var out []string
			for _, v := range kv.Value.GetArrayValue().GetValues() {
				out = append(out, v.GetStringValue())
			}
			return out
		}
	}
	return nil
}

// TestPartialSuccess reads the backend's partial-success answer as the
// OTLP types write it.
func TestPartialSuccess(t *testing.T) {
	full, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{PartialSuccess: &colmetricpb.ExportMetricsPartialSuccess{RejectedDataPoints: 3, ErrorMessage: "bad point"}})
	empty, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
	for _, c := range []struct {
		name, ct string
		body     []byte
		rejected int64
		msg      string
	}{
		{"partial", "application/x-protobuf", full, 3, "bad point"},
		{"success", "application/x-protobuf", empty, 0, ""},
		{"json answer", "application/json", []byte(`{"partialSuccess":{}}`), 0, ""},
		{"truncated", "application/x-protobuf", full[:len(full)-2], 0, ""},
	} {
		r, m := partialSuccess(c.body, c.ct)
		if r != c.rejected || m != c.msg {
			t.Errorf("%s: got %d %q, want %d %q", c.name, r, m, c.rejected, c.msg)
		}
	}
}
