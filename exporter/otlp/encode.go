package otlp

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/encoding/protowire"
)

// encode writes rm as an ExportMetricsServiceRequest into w.req, in one
// pass over the output: a first pass sizes every message (looking up each
// data point's cached attributes once), the second writes each byte once,
// nested messages' lengths already known. (Writing each level into its own
// buffer and appending it to its parent's copied the whole request three
// times more, and memmove was a fifth of the agent's CPU.)
func (w *MetricExporter) encode(rm *metricdata.ResourceMetrics) []byte {
	w.now = time.Now()
	w.ms = w.ms[:0]
	w.pattrs = w.pattrs[:0]
	w.hist = w.hist[:0]
	w.scopeSizes = w.scopeSizes[:0]
	// Pass 1: sizes.
	rmSize := 0
	for i := range rm.ScopeMetrics {
		sm := &rm.ScopeMetrics[i]
		size := sizeBytes(1, scopeSize(&sm.Scope)) + sizeString(3, sm.Scope.SchemaURL)
		for j := range sm.Metrics {
			m := &sm.Metrics[j]
			wm := w.sizeMetric(m)
			w.ms = append(w.ms, wm)
			if wm.field != 0 {
				size += sizeBytesAlways(2, wm.size)
			}
		}
		w.scopeSizes = append(w.scopeSizes, size)
		rmSize += sizeBytesAlways(2, size)
	}
	resSize, schema := 0, ""
	if rm.Resource != nil {
		for it := rm.Resource.Iter(); it.Next(); {
			resSize += sizeKeyValue(1, it.Attribute())
		}
		schema = rm.Resource.SchemaURL()
	}
	rmSize += sizeBytes(1, resSize) + sizeString(3, schema)

	// Pass 2: bytes.
	b := w.req[:0]
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(rmSize))
	if resSize > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(resSize))
		for it := rm.Resource.Iter(); it.Next(); {
			b = appendKeyValue(b, 1, it.Attribute())
		}
	}
	mi, pi := 0, 0
	for i := range rm.ScopeMetrics {
		sm := &rm.ScopeMetrics[i]
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(w.scopeSizes[i]))
		if n := scopeSize(&sm.Scope); n > 0 {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(n))
			b = appendString(b, 1, sm.Scope.Name)
			b = appendString(b, 2, sm.Scope.Version)
			for it := sm.Scope.Attributes.Iter(); it.Next(); {
				b = appendKeyValue(b, 3, it.Attribute())
			}
		}
		for j := range sm.Metrics {
			wm := &w.ms[mi]
			mi++
			if wm.field == 0 {
				continue
			}
			m := &sm.Metrics[j]
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(wm.size))
			b = appendString(b, 1, m.Name)
			b = appendString(b, 2, m.Description)
			b = appendString(b, 3, m.Unit)
			b = protowire.AppendTag(b, wm.field, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(wm.dataSize))
			b, pi = w.appendData(b, m.Data, wm, pi)
		}
		b = appendString(b, 3, sm.Scope.SchemaURL)
	}
	b = appendString(b, 3, schema)
	w.req = b
	// Forget the attribute sets no export used for keep (programs gone).
	if w.now.Sub(w.pruned) >= w.keep/4 {
		w.pruned = w.now
		for k, a := range w.attrs {
			if w.now.Sub(a.used) > w.keep {
				delete(w.attrs, k)
			}
		}
	}
	return w.req
}

// wireMetric is one metric's sizes from the first pass: its Metric field
// (gauge 5, sum 7, histogram 9; 0 leaves it out), the data message's
// size and the Metric message's; a histogram's data is encoded in the
// first pass already, at hist[histFrom:histTo].
type wireMetric struct {
	field            protowire.Number
	dataSize, size   int
	histFrom, histTo int
}

func scopeSize(sc *instrumentation.Scope) int {
	n := sizeString(1, sc.Name) + sizeString(2, sc.Version)
	for it := sc.Attributes.Iter(); it.Next(); {
		n += sizeKeyValue(3, it.Attribute())
	}
	return n
}

// sizeMetric sizes a metric and notes its points' attribute encodings in
// w.pattrs. A metric without points, or of an aggregation bpfleet never
// makes (exponential histograms, summaries), is left out.
func (w *MetricExporter) sizeMetric(m *metricdata.Metrics) wireMetric {
	var wm wireMetric
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		wm.field, wm.dataSize = 5, sizePoints(w, d.DataPoints)
	case metricdata.Gauge[float64]:
		wm.field, wm.dataSize = 5, sizePoints(w, d.DataPoints)
	case metricdata.Sum[int64]:
		wm.field, wm.dataSize = 7, sizePoints(w, d.DataPoints)+sizeSumTail(d.Temporality, d.IsMonotonic)
	case metricdata.Sum[float64]:
		wm.field, wm.dataSize = 7, sizePoints(w, d.DataPoints)+sizeSumTail(d.Temporality, d.IsMonotonic)
	case metricdata.Histogram[int64]:
		wm = encodeHistogram(w, d)
	case metricdata.Histogram[float64]:
		wm = encodeHistogram(w, d)
	}
	if points(m.Data) == 0 {
		wm.field = 0
	}
	if wm.field != 0 {
		wm.size = sizeString(1, m.Name) + sizeString(2, m.Description) + sizeString(3, m.Unit) + sizeBytesAlways(wm.field, wm.dataSize)
	}
	return wm
}

func points(d metricdata.Aggregation) int {
	switch d := d.(type) {
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[float64]:
		return len(d.DataPoints)
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Sum[float64]:
		return len(d.DataPoints)
	case metricdata.Histogram[int64]:
		return len(d.DataPoints)
	case metricdata.Histogram[float64]:
		return len(d.DataPoints)
	}
	return 0
}

// numberPointSize is a NumberDataPoint's size: attributes, time and
// value (fixed64 each, tag included), and the start time when set.
func numberPointSize(attrs int, start time.Time) int {
	n := attrs + 9 + 9
	if !start.IsZero() {
		n += 9
	}
	return n
}

// encodeHistogram encodes a histogram's points and tail into w.hist in the
// sizing pass already (their size is what the encoding takes) and notes
// where they sit.
func encodeHistogram[N int64 | float64](w *MetricExporter, d metricdata.Histogram[N]) wireMetric {
	wm := wireMetric{field: 9, histFrom: len(w.hist)}
	w.hist = histogramPoints(w.hist, d.DataPoints)
	w.hist = appendSumTail(w.hist, d.Temporality, false)
	wm.histTo = len(w.hist)
	wm.dataSize = wm.histTo - wm.histFrom
	return wm
}

func sizePoints[N int64 | float64](w *MetricExporter, pts []metricdata.DataPoint[N]) int {
	n := 0
	for i := range pts {
		a := w.pointAttrs(pts[i].Attributes)
		w.pattrs = append(w.pattrs, a)
		n += sizeBytesAlways(1, numberPointSize(len(a), pts[i].StartTime))
	}
	return n
}

// appendData writes a metric's data message body; pi indexes w.pattrs.
func (w *MetricExporter) appendData(b []byte, d metricdata.Aggregation, wm *wireMetric, pi int) ([]byte, int) {
	switch d := d.(type) {
	case metricdata.Gauge[int64]:
		return appendIntPoints(b, d.DataPoints, w.pattrs, pi)
	case metricdata.Gauge[float64]:
		return appendFloatPoints(b, d.DataPoints, w.pattrs, pi)
	case metricdata.Sum[int64]:
		b, pi = appendIntPoints(b, d.DataPoints, w.pattrs, pi)
		return appendSumTail(b, d.Temporality, d.IsMonotonic), pi
	case metricdata.Sum[float64]:
		b, pi = appendFloatPoints(b, d.DataPoints, w.pattrs, pi)
		return appendSumTail(b, d.Temporality, d.IsMonotonic), pi
	}
	return append(b, w.hist[wm.histFrom:wm.histTo]...), pi
}

func appendIntPoints(b []byte, pts []metricdata.DataPoint[int64], attrs [][]byte, pi int) ([]byte, int) {
	for i := range pts {
		b = appendNumberPoint(b, attrs[pi], pts[i].StartTime, pts[i].Time, 6, uint64(pts[i].Value))
		pi++
	}
	return b, pi
}

func appendFloatPoints(b []byte, pts []metricdata.DataPoint[float64], attrs [][]byte, pi int) ([]byte, int) {
	for i := range pts {
		b = appendNumberPoint(b, attrs[pi], pts[i].StartTime, pts[i].Time, 4, math.Float64bits(pts[i].Value))
		pi++
	}
	return b, pi
}

// appendNumberPoint writes a NumberDataPoint (data_points, field 1):
// attributes 7, start_time_unix_nano 2, time_unix_nano 3 (fixed64),
// as_double 4 or as_int 6.
func appendNumberPoint(b, attrs []byte, start, now time.Time, valueField protowire.Number, value uint64) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(numberPointSize(len(attrs), start)))
	b = append(b, attrs...)
	if !start.IsZero() {
		b = appendFixed64Field(b, 2, uint64(start.UnixNano()))
	}
	b = appendFixed64Field(b, 3, uint64(now.UnixNano()))
	return appendFixed64Field(b, valueField, value)
}

// appendSumTail appends a Sum's or Histogram's aggregation_temporality (2)
// and is_monotonic (3).
func appendSumTail(b []byte, t metricdata.Temporality, monotonic bool) []byte {
	b = appendVarintField(b, 2, uint64(temporality(t)))
	if monotonic {
		b = appendVarintField(b, 3, 1)
	}
	return b
}

func sizeSumTail(t metricdata.Temporality, monotonic bool) int {
	n := protowire.SizeTag(2) + protowire.SizeVarint(uint64(temporality(t)))
	if monotonic {
		n += protowire.SizeTag(3) + 1
	}
	return n
}

// temporality maps the SDK's temporality to OTLP's AggregationTemporality
// (1 delta, 2 cumulative).
func temporality(t metricdata.Temporality) int {
	switch t {
	case metricdata.DeltaTemporality:
		return 1
	case metricdata.CumulativeTemporality:
		return 2
	}
	return 0
}

// pointAttrs returns the cached encoding of s as NumberDataPoint
// attributes, encoding it on first use.
func (w *MetricExporter) pointAttrs(s attribute.Set) []byte {
	k := s.Equivalent()
	a := w.attrs[k]
	if a == nil {
		a = &wireAttrs{}
		for it := s.Iter(); it.Next(); {
			a.b = appendKeyValue(a.b, 7, it.Attribute())
		}
		w.attrs[k] = a
	}
	a.used = w.now
	return a.b
}

// histogramPoints appends HistogramDataPoints: attributes 9, start 2,
// time 3, count 4, sum 5, bucket_counts 6 and explicit_bounds 7 (packed
// fixed64), min 11, max 12. Few (the scan duration, profiled programs):
// written through a scratch buffer, attributes not cached.
func histogramPoints[N int64 | float64](b []byte, pts []metricdata.HistogramDataPoint[N]) []byte {
	var p []byte
	for i := range pts {
		h := &pts[i]
		p = p[:0]
		for it := h.Attributes.Iter(); it.Next(); {
			p = appendKeyValue(p, 9, it.Attribute())
		}
		if !h.StartTime.IsZero() {
			p = appendFixed64Field(p, 2, uint64(h.StartTime.UnixNano()))
		}
		p = appendFixed64Field(p, 3, uint64(h.Time.UnixNano()))
		p = appendFixed64Field(p, 4, h.Count)
		p = appendFixed64Field(p, 5, math.Float64bits(float64(h.Sum)))
		if len(h.BucketCounts) > 0 {
			p = protowire.AppendTag(p, 6, protowire.BytesType)
			p = protowire.AppendVarint(p, uint64(8*len(h.BucketCounts)))
			for _, c := range h.BucketCounts {
				p = protowire.AppendFixed64(p, c)
			}
		}
		if len(h.Bounds) > 0 {
			p = protowire.AppendTag(p, 7, protowire.BytesType)
			p = protowire.AppendVarint(p, uint64(8*len(h.Bounds)))
			for _, x := range h.Bounds {
				p = protowire.AppendFixed64(p, math.Float64bits(x))
			}
		}
		if v, ok := h.Min.Value(); ok {
			p = appendFixed64Field(p, 11, math.Float64bits(float64(v)))
		}
		if v, ok := h.Max.Value(); ok {
			p = appendFixed64Field(p, 12, math.Float64bits(float64(v)))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	return b
}
