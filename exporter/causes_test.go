package exporter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// byCause is the points of one series' causes: cause → value. It fails on
// a point without bpf.miss.cause or with a cause outside the closed set.
func byCause(t *testing.T, pts []point, key string, want attribute.Value) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, p := range pts {
		if v, ok := p.attrs.Value(attribute.Key(key)); !ok || v != want {
			continue
		}
		c, ok := p.attrs.Value(attrMissCause)
		if !ok {
			t.Fatalf("a miss point without %s: %v", attrMissCause, p.attrs.Encoded(attribute.DefaultEncoder()))
		}
		if !slices.Contains(agent.Causes[:], c.AsString()) {
			t.Fatalf("cause %q is not one of %v", c.AsString(), agent.Causes)
		}
		if _, dup := out[c.AsString()]; dup {
			t.Fatalf("two series of cause %q", c.AsString())
		}
		out[c.AsString()] = p.value
	}
	return out
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// Each program's misses go out by cause: unexplained always (the whole
// count where nothing was explained: the series a node had before causes),
// another cause once it counted; they add up to the kernel's counter.
func TestMissCauseSeries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		misses *uint64
		causes *agent.MissCauses
		want   map[string]float64
	}{
		{"no watcher: one unexplained series, the whole count", u64(17), nil, map[string]float64{"unexplained": 17}},
		{"no misses: one unexplained series at 0", u64(0), nil, map[string]float64{"unexplained": 0}},
		{"explained in part", u64(17), &agent.MissCauses{Recursion: 10, Preempted: 2, Unexplained: 5},
			map[string]float64{"recursion": 10, "preempted": 2, "unexplained": 5}},
		{"all explained: unexplained stays at 0", u64(6), &agent.MissCauses{Nested: 4, Interrupt: 2},
			map[string]float64{"interrupt": 2, "nested": 4, "unexplained": 0}},
		{"no counter: no series", nil, nil, map[string]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, r, _ := newTestExporter(t, Config{Level: LevelProgram})
			p := prog(42, 100, tc.misses)
			p.MissCauses = tc.causes
			e.Update(context.Background(), snapshot(1, p))
			got, _ := collect(t, r)
			c := byCause(t, got["bpf.program.recursion_misses"], attrProgramID, attribute.Int64Value(42))
			if !mapsEqual(c, tc.want) {
				t.Fatalf("series by cause %v, want %v", c, tc.want)
			}
			if tc.misses != nil && sum(c) != float64(*tc.misses) {
				t.Fatalf("causes add up to %v, the counter is %d", sum(c), *tc.misses)
			}
			// The run series keep their attributes: no cause there.
			for _, pt := range got["bpf.program.run.count"] {
				if _, ok := pt.attrs.Value(attrMissCause); ok {
					t.Fatalf("run.count carries %s", attrMissCause)
				}
			}
		})
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// At the workload level the causes accumulate like the count: a key's
// causes grow by its programs' growth of each cause, adding up to the
// key's misses.
func TestWorkloadMissCauses(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	t0 := time.Now()
	p := podProg(1, "p", "w", "w-1", 10, t0, 100, 4)
	e.Update(context.Background(), snapshot(1, p))
	got, _ := collect(t, r)
	key := attribute.StringValue("w")
	if c := byCause(t, got["bpf.program.recursion_misses"], attrK8sWorkloadName, key); !mapsEqual(c, map[string]float64{"unexplained": 4}) {
		t.Fatalf("first scan %v, want unexplained 4", c)
	}
	p = podProg(1, "p", "w", "w-1", 10, t0, 200, 10)
	p.MissCauses = &agent.MissCauses{Recursion: 5, Unexplained: 5}
	e.Update(context.Background(), snapshot(2, p))
	got, _ = collect(t, r)
	want := map[string]float64{"recursion": 5, "unexplained": 5}
	if c := byCause(t, got["bpf.program.recursion_misses"], attrK8sWorkloadName, key); !mapsEqual(c, want) {
		t.Fatalf("second scan %v, want %v", c, want)
	}
}

// Attach types and owners: their interval's misses by the explained
// causes of their programs, the rest unexplained; no series at all where
// the aggregates' recursion_misses are absent (a kernel without the
// counter, 5.10), not zeros.
func TestAggregateMissCauses(t *testing.T) {
	for _, tc := range []struct {
		level  Level
		misses *uint64 // the program's and its aggregates'
		want   map[string]float64
	}{
		{LevelAttachType, u64(6), map[string]float64{"interrupt": 4, "unexplained": 2}},
		{LevelOwner, u64(6), map[string]float64{"interrupt": 4, "unexplained": 2}},
		{LevelAttachType, nil, nil},
		{LevelOwner, nil, nil},
	} {
		t.Run(fmt.Sprintf("%v_known_%v", tc.level, tc.misses != nil), func(t *testing.T) {
			e, r, _ := newTestExporter(t, Config{Level: tc.level})
			p := prog(42, 100, tc.misses)
			if tc.misses != nil {
				p.Delta = agent.Rates{Misses: 6}
				p.DeltaCauses = agent.MissCauses{Interrupt: 4}
				p.MissCauses = &agent.MissCauses{Interrupt: 4, Unexplained: 2}
			}
			s := snapshot(1, p)
			s.AttachTypes = []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: 1, RecursionMisses: tc.misses, Delta: p.Delta}}
			s.Owners = []agent.OwnerStat{{Key: "pid:9", PID: 9, ProgramIDs: []uint32{42}, RecursionMisses: tc.misses, Delta: p.Delta}}
			e.Update(context.Background(), s)
			got, _ := collect(t, r)
			if tc.want == nil {
				for _, m := range []string{"bpf.attach_type.recursion_misses", "bpf.owner.recursion_misses"} {
					if len(got[m]) > 0 {
						t.Errorf("%s: %d points where the kernel counts no recursion misses, want none", m, len(got[m]))
					}
				}
				return
			}
			c := byCause(t, got["bpf.attach_type.recursion_misses"], attrAttachType, attribute.StringValue("tp_btf"))
			if !mapsEqual(c, tc.want) {
				t.Errorf("attach type %v, want %v", c, tc.want)
			}
			if tc.level == LevelOwner {
				c := byCause(t, got["bpf.owner.recursion_misses"], attrOwnerKey, attribute.StringValue("pid:9"))
				if !mapsEqual(c, tc.want) {
					t.Errorf("owner %v, want %v", c, tc.want)
				}
			}
		})
	}
}

// The watcher's own metrics come from Snapshot.MissWatch.
func TestMissWatchMetrics(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelAttachType})
	s := snapshot(1)
	s.MissWatch = agent.MissWatch{Available: true, Slots: 4, Watched: []agent.WatchedProgram{{ProgID: 1}, {ProgID: 2}}, Samples: 30, OverBudget: 7}
	e.Update(context.Background(), s)
	got, _ := collect(t, r)
	for name, want := range map[string]float64{
		"bpf.agent.misswatch.available": 1, "bpf.agent.misswatch.watched": 2,
		"bpf.agent.misswatch.samples": 30, "bpf.agent.misswatch.over_budget": 7,
	} {
		if v := value0(got[name]); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}

// An episode span carries every cause's count, the dominant cause, the
// contexts, and its top stacks and tasks as events; without the watcher
// its misses are all unexplained.
func TestEpisodeSpanCauses(t *testing.T) {
	e, _, rec := newTestExporter(t, Config{Level: LevelProgram})
	t0 := time.Unix(2000, 0)
	ep := agent.Episode{Source: agent.SourceRecursionMisses, ProgID: 42, ProgName: "canary", Start: t0, End: t0.Add(10 * time.Second),
		Misses: 12, Runs: 5, Reason: "quiet",
		Causes:   agent.MissCauses{Recursion: 7, Preempted: 3, Unexplained: 2},
		Contexts: map[string]uint64{agent.ContextTask: 9, agent.ContextSoftirq: 1},
		Stacks:   []agent.EpisodeStack{{Cause: agent.CauseRecursion, Context: agent.ContextTask, Stack: []string{"bpf_prog_inc_misses_counter+0x10", "htab_map_delete_elem+0x5"}, Misses: 7}},
		Tasks:    []agent.EpisodeTask{{PID: 77, Comm: "loader", PodName: "web-1", PodNamespace: "shop", Misses: 9}},
	}
	bare := ep
	bare.ProgID, bare.Causes, bare.Contexts, bare.Stacks, bare.Tasks = 43, agent.MissCauses{}, nil, nil, nil
	s := snapshot(1)
	s.Episodes = []agent.Episode{ep, bare}
	e.Update(context.Background(), s)
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := attribute.NewSet(spans[0].Attributes()...)
	for k, want := range map[string]attribute.Value{
		"bpf.miss.cause.recursion":   attribute.Int64Value(7),
		"bpf.miss.cause.interrupt":   attribute.Int64Value(0),
		"bpf.miss.cause.preempted":   attribute.Int64Value(3),
		"bpf.miss.cause.nested":      attribute.Int64Value(0),
		"bpf.miss.cause.unexplained": attribute.Int64Value(2),
		"bpf.miss.cause":             attribute.StringValue("recursion"),
		"bpf.miss.context.task":      attribute.Int64Value(9),
		"bpf.miss.context.softirq":   attribute.Int64Value(1),
	} {
		if v, _ := attrs.Value(attribute.Key(k)); v != want {
			t.Errorf("span %s = %v, want %v", k, v.String(), want.String())
		}
	}
	var stack, task bool
	for _, ev := range spans[0].Events() {
		a := attribute.NewSet(ev.Attributes...)
		switch ev.Name {
		case missStackEvent:
			st, _ := a.Value(attrMissStack)
			c, _ := a.Value(attrMissCause)
			n, _ := a.Value(attrEpisodeMisses)
			stack = st.AsString() == "bpf_prog_inc_misses_counter+0x10\nhtab_map_delete_elem+0x5" && c.AsString() == "recursion" && n.AsInt64() == 7
		case missTaskEvent:
			pid, _ := a.Value(attrProcessPID)
			pod, _ := a.Value(attrK8sPodName)
			task = pid.AsInt64() == 77 && pod.AsString() == "web-1"
		}
	}
	if !stack || !task {
		t.Errorf("stack event ok %v, task event ok %v: %v", stack, task, spans[0].Events())
	}
	attrs = attribute.NewSet(spans[1].Attributes()...)
	if v, _ := attrs.Value("bpf.miss.cause.unexplained"); v.AsInt64() != 12 {
		t.Errorf("without the watcher unexplained = %v, want all 12", v.String())
	}
	if v, _ := attrs.Value("bpf.miss.cause"); v.AsString() != "unexplained" {
		t.Errorf("without the watcher the dominant cause = %q, want unexplained", v.AsString())
	}
	for _, kv := range spans[1].Attributes() {
		if strings.HasPrefix(string(kv.Key), attrMissContext) {
			t.Errorf("context %s without samples", kv.Key)
		}
	}
}
