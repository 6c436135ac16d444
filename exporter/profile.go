package exporter

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// profileMetric is the profiler's histogram: per selected program, every
// run's duration as the fentry/fexit pair measured it.
const profileMetric = "bpf.program.profile.duration"

// profileBounds are the histogram's explicit bounds in seconds: the
// profiler's log2 buckets, 2 ns .. 2^40 ns (18 min); longer runs fall in
// the overflow bucket.
var profileBounds = func() []float64 {
	b := make([]float64, 40)
	for i := range b {
		b[i] = math.Ldexp(1, i+1) / 1e9
	}
	return b
}()

// profileSeries is one profiled program's cumulative histogram.
type profileSeries struct {
	attrs attribute.Set
	start time.Time // when the exporter first saw the profile
	prof  agent.ProfileStat
}

// profileProducer hands the profiled programs' histograms to every metric
// reader as already aggregated data: the kernel did the counting, and the
// SDK's synchronous histogram would need one Record call per run.
type profileProducer struct {
	mu     sync.Mutex
	e      *Exporter
	starts map[uint32]time.Time
}

// series builds the profile series of a snapshot (with e.mu held, from
// buildView): programs whose profile has data, at any level.
func (e *Exporter) profileSeries(s *agent.Snapshot) []profileSeries {
	var out []profileSeries
	p := e.prof
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starts == nil {
		p.starts = map[uint32]time.Time{}
	}
	live := map[uint32]bool{}
	for i := range s.Programs {
		ps := s.Programs[i]
		if ps.Profile == nil || ps.Profile.Error != "" || len(ps.Profile.Buckets) == 0 {
			continue
		}
		live[ps.ID] = true
		st, ok := p.starts[ps.ID]
		if !ok {
			st = s.Time
			p.starts[ps.ID] = st
		}
		kv := identityKVs(nil, ps.ID, ps.Name, ps.Tag, ps.Type, ps.AttachType, ps.AttachTarget, ps.Sleepable)
		out = append(out, profileSeries{attrs: attribute.NewSet(kv...), start: st, prof: *ps.Profile})
	}
	for id := range p.starts {
		if !live[id] {
			delete(p.starts, id)
		}
	}
	return out
}

// Produce implements sdkmetric.Producer.
func (p *profileProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	if p == nil || p.e == nil {
		return nil, nil
	}
	v := p.e.latest()
	if v == nil || len(v.profiles) == 0 {
		return nil, nil
	}
	now := p.e.stamp(v)
	h := metricdata.Histogram[float64]{Temporality: metricdata.CumulativeTemporality}
	for _, s := range v.profiles {
		counts := make([]uint64, len(profileBounds)+1)
		var timed uint64 // = Runs unless timed in windows only
		for b, n := range s.prof.Buckets {
			counts[min(b, len(profileBounds))] += n
			timed += n
		}
		maxS := float64(s.prof.MaxNs) / 1e9
		h.DataPoints = append(h.DataPoints, metricdata.HistogramDataPoint[float64]{
			Attributes: s.attrs, StartTime: s.start, Time: now,
			Count: timed, Sum: float64(s.prof.SumNs) / 1e9, Bounds: profileBounds, BucketCounts: counts,
			Max: metricdata.NewExtrema(maxS),
		})
	}
	d := defByName(profileMetric)
	return []metricdata.ScopeMetrics{{
		Scope:   instrumentation.Scope{Name: "github.com/bpfleet/bpfleet/exporter/profiler"},
		Metrics: []metricdata.Metrics{{Name: d.Name, Description: d.Description, Unit: d.Unit, Data: h}},
	}}, nil
}

func defByName(n string) metricDef {
	for _, d := range metricDefs {
		if d.Name == n {
			return d
		}
	}
	return metricDef{Name: n}
}
