package exporter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// podProg is a program owned by a pod of a workload, as the agent reports
// it after the pod informer named the owner.
func podProg(id uint32, name, workload, pod string, pid int, loaded time.Time, runs, misses uint64) agent.ProgramStat {
	return agent.ProgramStat{Program: agent.Program{
		ID: id, Name: name, Tag: fmt.Sprintf("tag%d", id), Type: "tracing", AttachType: "tp_btf", AttachTarget: "sched_switch",
		MissKind: agent.MissKindRecursion, LoadTime: loaded, RunCount: runs, RunTimeNs: runs * 100, RecursionMisses: &misses,
		Owners: []agent.Owner{{PID: pid, Comm: "agentd", Exe: "/usr/bin/agentd", ContainerID: fmt.Sprintf("c%d", id),
			PodName: pod, PodNamespace: "obs", WorkloadKind: "DaemonSet", WorkloadName: workload, Via: "fd"}},
	}}
}

// seriesCount is the number of data points of every metric: what a
// backend holds as series at one instant.
func seriesCount(got map[string][]point) int {
	n := 0
	for _, pts := range got {
		n += len(pts)
	}
	return n
}

// Reloads (new ids, pods and pids under the same workloads) add no series
// at the workload level, and the counters go on summing: a reloaded
// program's first misses are added, never lost, and nothing goes down.
func TestWorkloadSeriesSurviveReloads(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	t0 := time.Now() // every program loads after the exporter started
	id := uint32(100)
	gen := func(i int, misses uint64) []agent.ProgramStat {
		var ps []agent.ProgramStat
		for _, w := range []string{"cilium", "tetragon"} {
			for _, name := range []string{"on_switch", "on_exec"} {
				id++
				ps = append(ps, podProg(id, name, w, fmt.Sprintf("%s-%d", w, i), 1000+int(id), t0.Add(time.Duration(i)*time.Millisecond), 50, misses))
			}
		}
		return ps
	}
	e.Update(context.Background(), snapshot(1, gen(0, 0)...))
	got, _ := collect(t, r)
	before := seriesCount(got)
	if n := len(got["bpf.program.recursion_misses"]); n != 4 {
		t.Fatalf("%d misses series for 2 workloads x 2 programs, want 4: %v", n, got["bpf.program.recursion_misses"])
	}
	key := func(pts []point, w, name string) float64 {
		t.Helper()
		for _, p := range pts {
			wv, _ := p.attrs.Value("k8s.workload.name")
			nv, _ := p.attrs.Value("bpf.program.name")
			if wv.AsString() == w && nv.AsString() == name {
				return p.value
			}
		}
		t.Fatalf("no series %s/%s in %v", w, name, pts)
		return 0
	}
	for _, p := range got["bpf.program.run.count"] {
		for _, k := range []string{"bpf.program.id", "process.pid", "k8s.pod.name", "container.id", "bpf.program.tag"} {
			if _, ok := p.attrs.Value(attribute.Key(k)); ok {
				t.Errorf("workload series carries identity %s: %v", k, p.attrs.Encoded(attribute.DefaultEncoder()))
			}
		}
		if v, _ := p.attrs.Value("k8s.workload.kind"); v.AsString() != "DaemonSet" {
			t.Errorf("workload kind %q", v.AsString())
		}
	}
	wantMisses := 0.0
	for i := 1; i <= 10; i++ {
		// Reload: every program unloads, new ones load with 7 misses each
		// already counted by the time the agent first sees them.
		e.Update(context.Background(), snapshot(uint64(i+1), gen(i, 7)...))
		got, _ = collect(t, r)
		wantMisses += 7
		if n := seriesCount(got); n != before {
			t.Errorf("reload %d: %d series, want %d as before", i, n, before)
		}
		if v := key(got["bpf.program.recursion_misses"], "cilium", "on_exec"); v != wantMisses {
			t.Errorf("reload %d: misses %v, want %v (every reloaded program's first misses)", i, v, wantMisses)
		}
		if v := key(got["bpf.program.run.count"], "tetragon", "on_switch"); v != float64(50*(i+1)) {
			t.Errorf("reload %d: runs %v, want %v", i, v, 50*(i+1))
		}
	}
	// A known program's growth is added once, not its whole counter again.
	id -= 4 // the ids of reload 10
	again := gen(10, 9)
	e.Update(context.Background(), snapshot(20, again...))
	got, _ = collect(t, r)
	if v := key(got["bpf.program.recursion_misses"], "cilium", "on_exec"); v != wantMisses+2 {
		t.Errorf("misses %v after the same programs grew by 2, want %v", v, wantMisses+2)
	}
}

// What programs counted before the exporter started is history: the
// workload series count from the exporter's start (their start time), so
// an agent restart is a clean counter reset, never the history of every
// loaded program again as one spike. Programs loaded since count whole.
func TestWorkloadCountsFromExporterStart(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	old := podProg(1, "p", "w", "w-1", 10, time.Now().Add(-time.Hour), 1000, 500)
	e.Update(context.Background(), snapshot(1, old))
	got, rm := collect(t, r)
	if v := value0(got["bpf.program.recursion_misses"]); v != 0 {
		t.Errorf("misses %v at the first scan, want 0 (the 500 are from before the exporter)", v)
	}
	stampStarts(&rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "bpf.program.recursion_misses" {
				if st := d.DataPoints[0].StartTime; !st.Equal(e.started) {
					t.Errorf("start %v, want the exporter's start %v", st, e.started)
				}
			}
		}
	}
	grown := podProg(1, "p", "w", "w-1", 10, time.Now().Add(-time.Hour), 1000, 503)
	fresh := podProg(2, "p", "w", "w-2", 11, time.Now(), 10, 4)
	e.Update(context.Background(), snapshot(2, grown, fresh))
	got, _ = collect(t, r)
	if v := value0(got["bpf.program.recursion_misses"]); v != 7 {
		t.Errorf("misses %v, want 7 (3 grown since the first scan, 4 of a program loaded since)", v)
	}
}

// A program whose pod is named only once the pod cache synced moves to a
// new key: the new key counts its growth from then on, and its start time
// is set once and never moves forward (a later start reads as a reset).
func TestWorkloadKeyChange(t *testing.T) {
	e, _, _ := newTestExporter(t, Config{Level: LevelWorkload})
	build := func(p agent.ProgramStat) *view {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.buildView(snapshot(1, p), time.Now())
	}
	loaded := time.Now()
	unnamed := podProg(1, "p", "", "", 10, loaded, 10, 2)
	unnamed.Owners[0].PodName, unnamed.Owners[0].PodNamespace, unnamed.Owners[0].WorkloadKind = "", "", ""
	build(unnamed)
	named := podProg(1, "p", "cilium", "cilium-x", 10, loaded, 15, 5)
	v := build(named)
	var moved *workloadSeries
	for i := range v.workloads {
		if w, _ := v.workloads[i].attrs.Value("k8s.workload.name"); w.AsString() == "cilium" {
			moved = v.workloads[i]
		}
	}
	if moved == nil || moved.acc.misses != 3 || moved.acc.runs != 5 {
		t.Fatalf("named key: %+v, want the growth since the previous scan (3 misses, 5 runs)", moved)
	}
	if !moved.start.Equal(e.started) {
		t.Errorf("named key starts %v, want the exporter's start %v", moved.start, e.started)
	}
	// A program loaded later under the key does not move its start.
	later := podProg(2, "p", "cilium", "cilium-y", 11, time.Now(), 1, 1)
	e.mu.Lock()
	v = e.buildView(snapshot(2, named, later), time.Now())
	e.mu.Unlock()
	for i := range v.workloads {
		if w, _ := v.workloads[i].attrs.Value("k8s.workload.name"); w.AsString() == "cilium" && !v.workloads[i].start.Equal(e.started) {
			t.Errorf("start moved to %v", v.workloads[i].start)
		}
	}
}

// A key whose programs all unloaded is exported with loaded 0 for the
// grace period (a restart within it continues the series), then ends.
func TestWorkloadGrace(t *testing.T) {
	e, _, _ := newTestExporter(t, Config{Level: LevelWorkload})
	now := time.Now()
	build := func(at time.Time, progs ...agent.ProgramStat) *view {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.buildView(snapshot(1, progs...), at)
	}
	build(now, podProg(1, "p", "w", "w-1", 10, now, 5, 1))
	v := build(now.Add(time.Minute))
	if len(v.workloads) != 1 || v.workloads[0].loaded != 0 || v.workloads[0].acc.misses != 1 {
		t.Fatalf("after unload: %+v, want the key with loaded 0 and its 1 miss", v.workloads)
	}
	v = build(now.Add(2*time.Minute), podProg(2, "p", "w", "w-2", 11, now.Add(2*time.Minute), 3, 4))
	if len(v.workloads) != 1 || v.workloads[0].acc.misses != 5 || v.workloads[0].loaded != 1 {
		t.Fatalf("after reload within grace: %+v, want one key with 5 misses", v.workloads)
	}
	build(now.Add(3 * time.Minute))
	if v := build(now.Add(3*time.Minute + workloadGrace + time.Second)); len(v.workloads) != 0 {
		t.Errorf("%d keys after the grace period, want 0", len(v.workloads))
	}
}

// Counters of a series first seen after its program loaded carry the load
// time as start time (what Prometheus' created-timestamp ingestion turns
// into a zero sample); gauges carry none.
func TestStartTimeIsLoadTime(t *testing.T) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		e, r, _ := newTestExporter(t, Config{Level: level})
		loaded := time.Now() // after the exporter started
		e.Update(context.Background(), snapshot(1, podProg(7, "p", "w", "w-1", 10, loaded, 5, 50)))
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		stampStarts(&rm)
		checked := 0
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					if m.Name == "bpf.program.recursion_misses" {
						checked++
						if st := d.DataPoints[0].StartTime; !st.Equal(loaded) {
							t.Errorf("%v: %s start %v, want the load time %v", level, m.Name, st, loaded)
						}
					}
				case metricdata.Gauge[int64]:
					for _, p := range d.DataPoints {
						if !p.StartTime.IsZero() {
							t.Errorf("%v: gauge %s has start time %v", level, m.Name, p.StartTime)
						}
					}
				}
			}
		}
		if checked != 1 {
			t.Errorf("%v: no recursion_misses series", level)
		}
	}
}

// --max-programs caps the workload keys (dropped programs counted) and
// sets the SDK's limit, whose overflow is counted too, never silent.
func TestWorkloadCapAndCardinalityLimit(t *testing.T) {
	var logBuf strings.Builder
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload, MaxPrograms: 3, ProgramInfo: true, Log: slog.New(slog.NewTextHandler(&logBuf, nil))})
	var ps []agent.ProgramStat
	now := time.Now()
	for i := range 100 {
		// 5 keys of 20 programs each.
		ps = append(ps, podProg(uint32(i+1), fmt.Sprintf("p%d", i%5), "w", fmt.Sprintf("w-%d", i), 100+i, now, 1, 0))
	}
	e.Update(context.Background(), snapshot(1, ps...))
	got, _ := collect(t, r)
	if n := len(got["bpf.program.run.count"]); n != 3 {
		t.Errorf("%d keys exported, want 3", n)
	}
	// 2 keys of 20 programs dropped by the cap; 100 info series over an
	// SDK limit of 2*3+64 = 70 fold 100-69 = 31 into the overflow series.
	limit := cardinalityLimit(3)
	wantOver := 100 - (limit - 1)
	if v := value0(got["bpf.agent.programs.dropped"]); v != float64(40+wantOver) {
		t.Errorf("dropped = %v, want %d (40 by the cap, %d by the SDK limit %d)", v, 40+wantOver, wantOver, limit)
	}
	overflow := 0
	for _, p := range got["bpf.program.info"] {
		if v, ok := p.attrs.Value("otel.metric.overflow"); ok && v.AsBool() {
			overflow++
		}
	}
	if n := len(got["bpf.program.info"]); n != limit || overflow != 1 {
		t.Errorf("info: %d series with %d overflow series, want %d with 1", n, overflow, limit)
	}
	// Said once per interval (the agent calls LogErrors once a scan).
	e.LogErrors()
	if n := strings.Count(logBuf.String(), "over the cardinality limit"); n != 1 {
		t.Errorf("%d log lines about the cardinality limit after one interval, want 1:\n%s", n, logBuf.String())
	}
	if cardinalityLimit(0) != 0 {
		t.Error("no cap must mean no SDK limit, not the SDK's 2,000")
	}
}

func closedEpisode(id uint32, t0 time.Time) agent.Episode {
	return agent.Episode{Source: agent.SourceRecursionMisses, ProgID: id, ProgName: "p", AttachType: "tp_btf", Kind: agent.MissKindRecursion,
		Start: t0, End: t0.Add(time.Second), Misses: 3, Runs: 3, Reason: "quiet"}
}

// The span budget caps spans per minute; the rest are counted.
func TestSpanBudget(t *testing.T) {
	e, r, rec := newTestExporter(t, Config{Level: LevelWorkload, SpanBudget: 2})
	s := snapshot(1)
	for i := range 5 {
		s.Episodes = append(s.Episodes, closedEpisode(uint32(i+1), time.Now()))
	}
	e.Update(context.Background(), s)
	if n := len(rec.Ended()); n != 2 {
		t.Errorf("%d spans, want the budget's 2", n)
	}
	got, _ := collect(t, r)
	if v := value0(got["bpf.agent.spans.dropped"]); v != 3 {
		t.Errorf("spans.dropped = %v, want 3", v)
	}
}

// An episode seen open gets an open span at once, carrying its owner; the
// final span links to it.
func TestEpisodeOpenSpanLinkedWithOwner(t *testing.T) {
	e, _, rec := newTestExporter(t, Config{Level: LevelWorkload})
	t0 := time.Now().Add(-time.Minute)
	p := podProg(42, "p", "cilium", "cilium-x1", 77, t0, 10, 3)
	ep := closedEpisode(42, t0)
	ep.Open, ep.Reason = true, ""
	s := snapshot(1, p)
	s.Episodes = []agent.Episode{ep}
	e.Update(context.Background(), s)
	e.Update(context.Background(), s) // still open: no second open span
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != OpenSpanName {
		t.Fatalf("spans %v, want one %s", spans, OpenSpanName)
	}
	openSC := spans[0].SpanContext()
	// The program unloads as the episode ends: the owner is still named.
	ep.Open, ep.Reason = false, "vanished"
	s = snapshot(2)
	s.Episodes = []agent.Episode{ep}
	e.Update(context.Background(), s)
	spans = rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	final := spans[1]
	if l := final.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != openSC.SpanID() {
		t.Errorf("final span links %v, want the open span %v", l, openSC.SpanID())
	}
	for _, sp := range spans {
		attrs := attribute.NewSet(sp.Attributes()...)
		for k, want := range map[string]string{"k8s.workload.name": "cilium", "k8s.workload.kind": "DaemonSet", "k8s.namespace.name": "obs", "k8s.pod.name": "cilium-x1", "process.executable.name": "agentd"} {
			if v, _ := attrs.Value(attribute.Key(k)); v.AsString() != want {
				t.Errorf("%s: %s = %q, want %q", sp.Name(), k, v.AsString(), want)
			}
		}
	}
}

// The per-program caches forget unloaded programs (they stay bounded
// under reloads), and keep the loaded ones when nothing unloaded.
func TestProgramCachesForgetUnloaded(t *testing.T) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		t.Run(level.String(), func(t *testing.T) {
			e, _, _ := newTestExporter(t, Config{Level: level})
			size := func() int {
				e.mu.Lock()
				defer e.mu.Unlock()
				if level == LevelProgram {
					return len(e.progCache)
				}
				return len(e.progLast)
			}
			now := time.Now()
			p := func(id uint32) agent.ProgramStat {
				return podProg(id, fmt.Sprintf("p%d", id), "w", "w-1", 10, now, 1, 0)
			}
			ctx := context.Background()
			e.Update(ctx, snapshot(1, p(1), p(2), p(3)))
			e.Update(ctx, snapshot(2, p(2), p(3)))
			if n := size(); n != 2 {
				t.Fatalf("%d cached programs after program 1 unloaded, want 2", n)
			}
			e.Update(ctx, snapshot(3, p(2), p(3), p(4)))
			e.Update(ctx, snapshot(4, p(2), p(3), p(4)))
			if n := size(); n != 3 {
				t.Fatalf("%d cached programs with three loaded, want 3", n)
			}
			e.Update(ctx, snapshot(5, p(4), p(5)))
			if n := size(); n != 2 {
				t.Fatalf("%d cached programs after two unloaded and one loaded, want 2", n)
			}
		})
	}
}

// TestSharedEntriesSameSeries feeds one exporter snapshots that hand an
// unchanged program's entry out again, as the agent does, and another
// fresh copies of every entry: each scan both must export the same points
// (the first skips unchanged entries).
func TestSharedEntriesSameSeries(t *testing.T) {
	shared, rs, _ := newTestExporter(t, Config{Level: LevelWorkload, ProgramInfo: true})
	fresh, rf, _ := newTestExporter(t, Config{Level: LevelWorkload, ProgramInfo: true})
	start := time.Unix(900, 0)
	var progs []*agent.ProgramStat
	for i := range 12 {
		p := podProg(uint32(i+1), fmt.Sprintf("p%d", i%4), fmt.Sprintf("w%d", i%3), fmt.Sprintf("pod-%d", i), 100+i, start, 10, 0)
		progs = append(progs, &p)
	}
	nextID := uint32(100)
	ctx := context.Background()
	for seq := uint64(1); seq <= 30; seq++ {
		for i, p := range progs {
			c := *p
			switch (i + int(seq)) % 7 {
			case 0: // ran
				c.RunCount += seq
				c.RunTimeNs += 100 * seq
			case 3: // missed
				m := *c.RecursionMisses + 1
				c.RecursionMisses = &m
			case 5: // reloaded: a new id under the same key, loaded now
				if seq%2 == 0 {
					nextID++
					c.ID, c.RunCount, c.RunTimeNs, c.LoadTime = nextID, 1, 100, time.Unix(1000+int64(seq)*10, 0)
				}
			case 6: // its pod renamed (a new key)
				if seq%5 == 0 {
					c.Owners = []agent.Owner{c.Owners[0]}
					c.Owners[0].WorkloadName = fmt.Sprintf("w%d", seq)
				}
			default: // idle: the same entry
				continue
			}
			progs[i] = &c
		}
		s := snapshot(seq)
		s.Programs = append([]*agent.ProgramStat(nil), progs...)
		shared.Update(ctx, s)
		f := snapshot(seq)
		for _, p := range progs {
			c := *p
			f.Programs = append(f.Programs, &c)
		}
		fresh.Update(ctx, f)
		gs, _ := collect(t, rs)
		gf, _ := collect(t, rf)
		if a, b := pointsText(gs), pointsText(gf); a != b {
			t.Fatalf("scan %d: shared entries exported\n%s\nfresh copies\n%s", seq, a, b)
		}
	}
}

// pointsText is every point of the bpf.program.* metrics, one line each, sorted.
func pointsText(got map[string][]point) string {
	var lines []string
	for name, pts := range got {
		if !strings.HasPrefix(name, "bpf.program.") {
			continue
		}
		for _, p := range pts {
			lines = append(lines, fmt.Sprintf("%s %s %v", name, p.attrs.Encoded(attribute.DefaultEncoder()), p.value))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// The workload key holds no per-instance value: for each pair, two
// instances of the same thing (restarted pod, reloaded program, upgraded
// binary) have the same key, and two different things different keys.
func TestWorkloadKeyStable(t *testing.T) {
	prog := func(name, target, class, exe string) *agent.Program {
		return &agent.Program{Name: name, Type: "cgroup_device", AttachType: "cgroup_device", AttachTarget: target, TargetClass: class, MissKind: agent.MissKindNone,
			Owners: []agent.Owner{{PID: 7, Comm: "x", Exe: exe, Via: "fd"}}}
	}
	bare := &agent.Program{Name: "p", Owners: []agent.Owner{{PodName: "static-node1", PodNamespace: "kube-system", Via: agent.ViaAttachment}}}
	for _, tc := range []struct {
		what string
		a, b *agent.Program
		same bool
	}{
		{"the target's class, not the target", prog("", "/kubepods.slice/a/cri-containerd-1.scope", "kubepods/burstable", ""), prog("", "/kubepods.slice/b/cri-containerd-2.scope", "kubepods/burstable", ""), true},
		{"another class", prog("", "/x", "kubepods/burstable", ""), prog("", "/x", "kubepods/besteffort", ""), false},
		{"a target without a class is its own", prog("", "sched_switch", "", ""), prog("", "sched_wakeup", "", ""), false},
		{"an id suffix", prog("cil_from_1a2b3", "", "", ""), prog("cil_from_9f8e7", "", "", ""), true},
		{"a number of the name's own", prog("flt_0001", "", "", ""), prog("flt_0002", "", "", ""), false},
		{"an upgraded binary", prog("p", "", "", "/usr/bin/agentd"), prog("p", "", "", "/usr/bin/agentd (deleted)"), true},
		{"another binary", prog("p", "", "", "/usr/bin/agentd"), prog("p", "", "", "/usr/bin/other"), false},
		{"a bare pod is its own workload", bare, bare, true},
	} {
		if got := workloadKeyOf(tc.a) == workloadKeyOf(tc.b); got != tc.same {
			t.Errorf("%s: keys %+v and %+v: same %v, want %v", tc.what, workloadKeyOf(tc.a), workloadKeyOf(tc.b), got, tc.same)
		}
	}
	if k := workloadKeyOf(bare); k.kind != "Pod" || k.workload != "static-node1" {
		t.Errorf("bare pod: key %+v, want kind Pod named static-node1", k)
	}
	for _, tc := range []struct{ in, want string }{
		{"cil_from_1a2b3", "cil_from_*"}, {"x-12345678", "x-*"}, {"a.b.00ff1", "a.b.*"}, {"prog_DEAD1", "prog_*"},
		{"flt_0001", "flt_0001"}, {"on_exec", "on_exec"}, {"handle_cafe0", "handle_*"}, {"handle_cafeb", "handle_cafeb"},
		{"sd_fw_ingress", "sd_fw_ingress"}, {"12345", "12345"}, {"", ""}, {"x_", "x_"},
	} {
		if got := stableName(tc.in); got != tc.want {
			t.Errorf("stableName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
