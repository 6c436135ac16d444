package exporter

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// linkMissedBy reads bpf.link.missed's points as value by link id (0 at
// the workload level) and reason.
func linkMissedBy(t *testing.T, pts []point) map[[2]string]float64 {
	t.Helper()
	out := map[[2]string]float64{}
	for _, p := range pts {
		r, ok := p.attrs.Value(attrLinkMissReason)
		if !ok {
			t.Errorf("bpf.link.missed point without %s: %v", attrLinkMissReason, p.attrs.Encoded(attribute.DefaultEncoder()))
			continue
		}
		id, _ := p.attrs.Value(attrLinkID)
		out[[2]string{id.String(), r.AsString()}] = p.value
	}
	return out
}

// TestLinkMissReasons: bpf.link.missed carries bpf.link.miss.reason, and
// each link's (each key's) series add up to the kernel's missed: nesting
// and maxactive where the agent read the split, unknown where it read only
// the sum.
func TestLinkMissReasons(t *testing.T) {
	split := func(missed, nesting, maxactive uint64) agent.Link {
		return agent.Link{ID: 5, Type: "perf_event", Missed: u64(missed), MissedNesting: u64(nesting), MissedMaxactive: u64(maxactive)}
	}
	t.Run("program", func(t *testing.T) {
		e, r, _ := newTestExporter(t, Config{Level: LevelProgram})
		p := prog(42, 10, u64(0))
		p.Links = []agent.Link{split(6, 4, 2), {ID: 7, Type: "perf_event", Missed: u64(5)}, {ID: 8, Type: "tracing"}}
		e.Update(context.Background(), snapshot(1, p))
		got, _ := collect(t, r)
		want := map[[2]string]float64{
			{"5", "nesting"}: 4, {"5", "maxactive"}: 2,
			{"7", "unknown"}: 5,
		}
		by := linkMissedBy(t, got["bpf.link.missed"])
		if len(by) != len(want) {
			t.Errorf("bpf.link.missed series %v, want %v", by, want)
		}
		for k, v := range want {
			if by[k] != v {
				t.Errorf("bpf.link.missed link %s reason %s = %v, want %v", k[0], k[1], by[k], v)
			}
		}
	})
	t.Run("workload", func(t *testing.T) {
		e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
		p := prog(42, 10, u64(0))
		p.Links = []agent.Link{split(6, 4, 2), {ID: 7, Type: "perf_event", Missed: u64(5)}}
		e.Update(context.Background(), snapshot(1, p)) // loaded before the exporter: counts from here
		p2 := prog(42, 10, u64(0))
		p2.Links = []agent.Link{split(16, 5, 11), {ID: 7, Type: "perf_event", Missed: u64(8)}}
		e.Update(context.Background(), snapshot(2, p2))
		got, _ := collect(t, r)
		by := linkMissedBy(t, got["bpf.link.missed"])
		want := map[[2]string]float64{{"", "nesting"}: 1, {"", "maxactive"}: 9, {"", "unknown"}: 3}
		if len(by) != len(want) {
			t.Errorf("bpf.link.missed series %v, want %v", by, want)
		}
		for k, v := range want {
			if by[k] != v {
				t.Errorf("bpf.link.missed reason %s = %v, want %v (growth 13: 10 split, 3 read as a sum)", k[1], by[k], v)
			}
		}
	})
}
