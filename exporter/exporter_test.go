package exporter

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
)

var update = flag.Bool("update", false, "rewrite METRICS.md from the metrics table")

func TestMetricsDoc(t *testing.T) {
	want := MetricsDoc()
	if *update {
		if err := os.WriteFile("METRICS.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("METRICS.md")
	if err != nil {
		t.Fatalf("reading METRICS.md: %v (run go generate ./exporter, or go test ./exporter -run TestMetricsDoc -update)", err)
	}
	if string(got) != want {
		t.Fatal("METRICS.md differs from the metrics table: run go generate ./exporter (or go test ./exporter -run TestMetricsDoc -update)")
	}
}

func TestEveryMetricIsObserved(t *testing.T) {
	atLevel := map[Level]map[string]bool{}
	for _, d := range metricDefs {
		// A name may have one row per level (the program metrics have other
		// attributes at the workload level), never two at one level.
		for _, l := range d.Levels {
			if atLevel[l] == nil {
				atLevel[l] = map[string]bool{}
			}
			if atLevel[l][d.Name] {
				t.Errorf("%s: listed twice at level %v", d.Name, l)
			}
			atLevel[l][d.Name] = true
		}
		// Exactly one source; a histogram is recorded (the scan) or produced
		// (the profiles), never observed; the series producer's counters
		// are the program and workload levels' only (the owner level has
		// its memory gauges from it). Nothing is observed outside the
		// table: each source is a field of its row.
		v := d.Value
		set := 0
		for _, ok := range []bool{v.observe != nil, v.counted != nil, v.series != 0, v.profile, v.scan} {
			if ok {
				set++
			}
		}
		if set != 1 {
			t.Errorf("%s: in the table but nothing observes it (%d value sources, want 1)", d.Name, set)
		}
		if (d.Kind == kindHistogram) != (v.scan || v.profile) {
			t.Errorf("%s: a %s whose values are recorded or profiled: %v", d.Name, d.Kind, v.scan || v.profile)
		}
		for _, l := range d.Levels {
			if v.series != 0 && d.Kind == kindCounter && l != LevelProgram && l != LevelWorkload {
				t.Errorf("%s: produced by the series producer at level %v, which does not produce", d.Name, l)
			}
		}
		if len(d.Levels) == 0 {
			t.Errorf("%s: no level exports it", d.Name)
		}
	}
}

func u64(v uint64) *uint64 { return &v }

func prog(id uint32, runTime uint64, misses *uint64) agent.ProgramStat {
	return agent.ProgramStat{Program: agent.Program{
		ID: id, Name: "p", Tag: "t", Type: "tracing", AttachType: "tp_btf",
		RunCount: uint64(id) * 10, RunTimeNs: runTime, RecursionMisses: misses,
	}}
}

func TestSelectPrograms(t *testing.T) {
	progs := ptrs([]agent.ProgramStat{
		prog(1, 100, u64(0)),
		prog(2, 900, nil),
		prog(3, 5, u64(7)), // missed: always kept first
		prog(4, 500, u64(0)),
		prog(5, 900, u64(0)), // ties with 2 on run time: lower id wins
	})
	for _, tc := range []struct {
		max  int
		want []uint32
	}{
		{0, []uint32{1, 2, 3, 4, 5}},
		{9, []uint32{1, 2, 3, 4, 5}},
		{1, []uint32{3}},
		{2, []uint32{2, 3}},
		{4, []uint32{2, 3, 4, 5}},
	} {
		var got []uint32
		for _, i := range selectPrograms(progs, tc.max) {
			got = append(got, progs[i].ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("max %d: selected %v, want %v", tc.max, got, tc.want)
		}
	}
}

func TestHostArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "riscv64": "riscv64"} {
		if got := hostArch(in); got != want {
			t.Errorf("hostArch(%q) = %q, want %q", in, got, want)
		}
	}
}

// newTestExporter returns an exporter whose metrics and spans are read in
// process by the SDK's own reader and recorder; no OTLP endpoint.
func newTestExporter(t *testing.T, cfg Config) (*Exporter, *sdkmetric.ManualReader, *tracetest.SpanRecorder) {
	t.Helper()
	var e *Exporter
	var opts []sdkmetric.ManualReaderOption
	for _, p := range Producers(&e) {
		opts = append(opts, sdkmetric.WithProducer(p))
	}
	r := sdkmetric.NewManualReader(opts...)
	rec := tracetest.NewSpanRecorder()
	cfg.Readers = append(cfg.Readers, r)
	cfg.SpanProcessors = append(cfg.SpanProcessors, rec)
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e, r, rec
}

// point is one collected data point, flattened for comparisons.
type point struct {
	value float64
	attrs attribute.Set
}

func collect(t *testing.T, r *sdkmetric.ManualReader) (map[string][]point, metricdata.ResourceMetrics) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: monotonic %v, temporality %v; want cumulative counter", m.Name, d.IsMonotonic, d.Temporality)
				}
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{float64(p.Value), p.Attributes})
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Value, p.Attributes})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{float64(p.Value), p.Attributes})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{p.Value, p.Attributes})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{float64(p.Count), p.Attributes})
				}
			}
		}
	}
	return out, rm
}

func value(t *testing.T, pts []point, key string, want attribute.Value) float64 {
	t.Helper()
	for _, p := range pts {
		if v, ok := p.attrs.Value(attribute.Key(key)); ok && v == want {
			return p.value
		}
	}
	t.Fatalf("no point with %s=%v in %v", key, want.String(), pts)
	return 0
}

// ptrs is progs as a snapshot holds them.
func ptrs(progs []agent.ProgramStat) []*agent.ProgramStat {
	out := make([]*agent.ProgramStat, len(progs))
	for i := range progs {
		out[i] = &progs[i]
	}
	return out
}

func snapshot(seq uint64, progs ...agent.ProgramStat) *agent.Snapshot {
	s := &agent.Snapshot{Seq: seq, Time: time.Unix(1000+int64(seq)*10, 0), Programs: ptrs(progs),
		Stats: agent.StatsState{Enabled: true, HeldByAgent: true}, Scan: agent.ScanStats{Duration: 3 * time.Millisecond, Programs: len(progs)}}
	return s
}

func TestProgramMetrics(t *testing.T) {
	yes := true
	e, r, _ := newTestExporter(t, Config{Level: LevelProgram, Kernel: agent.KernelInfo{Release: "6.18.0-test", Arch: "x86_64", CPUModel: "Test CPU"}, NodeName: "node-a"})
	p := prog(42, 2_500_000_000, u64(17))
	p.Sleepable = &yes
	p.AttachTarget = "bpf_trace_printk"
	p.Owners = []agent.Owner{{PID: 7, Comm: "tool", Exe: "/usr/bin/tool-bin", Via: "link"}, {PID: 9, Comm: "holder", Via: "fd"}}
	p.Links = []agent.Link{{ID: 5, ProgID: 42, Type: "perf_event", Missed: u64(3)}, {ID: 6, Type: "tracing"}}
	noMiss := prog(43, 10, nil)
	e.Update(context.Background(), snapshot(1, p, noMiss))

	got, rm := collect(t, r)
	id := attribute.Int64Value(42)
	if v := value(t, got["bpf.program.run.time"], "bpf.program.id", id); v != 2.5 {
		t.Errorf("run.time = %v s, want 2.5", v)
	}
	if v := value(t, got["bpf.program.run.count"], "bpf.program.id", id); v != 420 {
		t.Errorf("run.count = %v, want 420", v)
	}
	if v := value(t, got["bpf.program.recursion_misses"], "bpf.program.id", id); v != 17 {
		t.Errorf("recursion_misses = %v, want 17", v)
	}
	if n := len(got["bpf.program.recursion_misses"]); n != 1 {
		t.Errorf("recursion_misses has %d series, want 1 (a program without the counter has none)", n)
	}
	if v := value(t, got["bpf.link.missed"], "bpf.link.id", attribute.Int64Value(5)); v != 3 {
		t.Errorf("link.missed = %v, want 3", v)
	}
	if n := len(got["bpf.link.missed"]); n != 1 {
		t.Errorf("link.missed has %d series, want 1 (a link without missed has none)", n)
	}
	attrs := got["bpf.program.run.time"][0].attrs
	if attrs.Len() == 0 {
		t.Fatal("no attributes")
	}
	for k, want := range map[string]attribute.Value{
		"bpf.program.sleepable":   attribute.BoolValue(true),
		"bpf.attach.target":       attribute.StringValue("bpf_trace_printk"),
		"process.pid":             attribute.Int64Value(9), // the fd holder, not the link holder
		"process.executable.name": attribute.StringValue("holder"),
	} {
		pts := got["bpf.program.run.time"]
		for _, pt := range pts {
			if v, _ := pt.attrs.Value("bpf.program.id"); v != id {
				continue
			}
			if v, ok := pt.attrs.Value(attribute.Key(k)); !ok || v != want {
				t.Errorf("attribute %s = %v, want %v", k, v.String(), want.String())
			}
		}
	}
	res := map[string]string{}
	for _, kv := range rm.Resource.Attributes() {
		res[string(kv.Key)] = kv.Value.String()
	}
	for k, want := range map[string]string{"service.name": "bpfleet-agent", "os.version": "6.18.0-test", "host.arch": "amd64",
		"host.cpu.model.name": "Test CPU", "k8s.node.name": "node-a", "service.instance.id": "node-a", "os.type": "linux"} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q", k, res[k], want)
		}
	}
	if v := value0(got["bpf.agent.stats.enabled"]); v != 1 {
		t.Errorf("stats.enabled = %v", v)
	}
	if v := value0(got["bpf.agent.scan.duration"]); v != 1 {
		t.Errorf("scan.duration count = %v, want 1", v)
	}
}

func value0(pts []point) float64 {
	if len(pts) != 1 {
		return -1
	}
	return pts[0].value
}

// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, as internal/config
// resolves them, win over the agent's own attributes.
func TestResourceFromEnvWins(t *testing.T) {
	o, err := config.ResolveOTel(config.MapEnv(map[string]string{
		"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=prod,k8s.cluster.name=from-env,service.name=from-attributes",
		"OTEL_SERVICE_NAME":        "custom",
	}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	r := sdkmetric.NewManualReader()
	e, err := New(context.Background(), Config{Level: LevelAttachType, ClusterName: "c1", Readers: []sdkmetric.Reader{r}, OTel: o})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	_, rm := collect(t, r)
	res := map[string]string{}
	for _, kv := range rm.Resource.Attributes() {
		res[string(kv.Key)] = kv.Value.String()
	}
	for k, want := range map[string]string{"service.name": "custom", "k8s.cluster.name": "from-env", "deployment.environment.name": "prod"} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q", k, res[k], want)
		}
	}
}

func TestMaxProgramsDropsAndCounts(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelProgram, MaxPrograms: 2})
	e.Update(context.Background(), snapshot(1, prog(1, 10, nil), prog(2, 30, nil), prog(3, 20, nil), prog(4, 1, u64(1))))
	got, _ := collect(t, r)
	if n := len(got["bpf.program.run.count"]); n != 2 {
		t.Errorf("exported %d programs, want 2", n)
	}
	value(t, got["bpf.program.run.count"], "bpf.program.id", attribute.Int64Value(4)) // missed: kept
	value(t, got["bpf.program.run.count"], "bpf.program.id", attribute.Int64Value(2)) // most run time
	if v := value0(got["bpf.agent.programs.dropped"]); v != 2 {
		t.Errorf("dropped = %v, want 2", v)
	}
	if v := value0(got["bpf.agent.programs"]); v != 4 {
		t.Errorf("programs = %v, want 4", v)
	}
}

func TestLevelsLimitSeries(t *testing.T) {
	s := snapshot(1, prog(1, 10, u64(0)))
	s.AttachTypes = []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: 1}}
	s.Owners = []agent.OwnerStat{{Key: "pid:7", PID: 7, Comm: "tool", ProgramIDs: []uint32{1}}}
	for _, tc := range []struct {
		level         Level
		program, owns bool
	}{
		{LevelAttachType, false, false},
		{LevelOwner, false, true},
		{LevelWorkload, true, false},
		{LevelProgram, true, false},
	} {
		e, r, _ := newTestExporter(t, Config{Level: tc.level})
		e.Update(context.Background(), s)
		got, _ := collect(t, r)
		if has := len(got["bpf.program.run.count"]) > 0; has != tc.program {
			t.Errorf("level %v: program metrics present %v, want %v", tc.level, has, tc.program)
		}
		if has := len(got["bpf.owner.programs"]) > 0; has != tc.owns {
			t.Errorf("level %v: owner metrics present %v, want %v", tc.level, has, tc.owns)
		}
		if v := value(t, got["bpf.attach_type.programs"], "bpf.attach.type", attribute.StringValue("tp_btf")); v != 1 {
			t.Errorf("level %v: attach_type.programs = %v", tc.level, v)
		}
	}
}

// Aggregates are sums of interval deltas: they must not go down when a
// program unloads (a backend would read a counter reset).
func TestAttachTypeCountersMonotonic(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelAttachType})
	deltas := []agent.Rates{{Runs: 5, RunTimeNs: 1e9, Misses: 2}, {Runs: 3, RunTimeNs: 5e8}, {}}
	progs := []int{2, 2, 1}
	want := []float64{5, 8, 8}
	for i, d := range deltas {
		s := snapshot(uint64(i + 1))
		s.AttachTypes = []agent.AttachTypeStat{{AttachType: "raw_tp", Programs: progs[i], Delta: d}}
		s.Calibration = []agent.Calibration{{AttachType: "raw_tp", Supported: true, OverheadNs: 12}, {AttachType: "fentry", Reason: "EPERM"}}
		e.Update(context.Background(), s)
		got, _ := collect(t, r)
		if v := value(t, got["bpf.attach_type.run.count"], "bpf.attach.type", attribute.StringValue("raw_tp")); v != want[i] {
			t.Errorf("scan %d: attach_type.run.count = %v, want %v", i+1, v, want[i])
		}
		if v := value(t, got["bpf.attach_type.overhead"], "bpf.attach.type", attribute.StringValue("raw_tp")); v != 12e-9 {
			t.Errorf("overhead = %v s, want 12e-9", v)
		}
		if n := len(got["bpf.attach_type.overhead"]); n != 1 {
			t.Errorf("overhead has %d series, want 1 (unsupported types have none)", n)
		}
	}
}

func TestEpisodeSpans(t *testing.T) {
	e, _, rec := newTestExporter(t, Config{Level: LevelProgram})
	t0 := time.Unix(2000, 0)
	closed := agent.Episode{Source: agent.SourceRecursionMisses, ProgID: 42, ProgName: "canary", AttachType: "tp_btf", Kind: agent.MissKindRecursion,
		Start: t0, End: t0.Add(20 * time.Second), Misses: 30, Runs: 30, PeakRate: 2, Reason: "quiet",
		Intervals: []agent.EpisodeInterval{{Time: t0.Add(10 * time.Second), Misses: 10, Runs: 10, Rate: 1}, {Time: t0.Add(20 * time.Second), Misses: 20, Runs: 20, Rate: 2}}}
	open := closed
	open.Open = true
	open.ProgID = 43
	s := snapshot(1)
	s.Episodes = []agent.Episode{closed, open}
	e.Update(context.Background(), s)

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2 (the closed episode's, the open one's open span)", len(spans))
	}
	if spans[1].Name() != OpenSpanName {
		t.Errorf("second span %q, want %q", spans[1].Name(), OpenSpanName)
	}
	sp := spans[0]
	if sp.Name() != SpanName || !sp.StartTime().Equal(closed.Start) || !sp.EndTime().Equal(closed.End) {
		t.Errorf("span %q %v..%v, want %q %v..%v", sp.Name(), sp.StartTime(), sp.EndTime(), SpanName, closed.Start, closed.End)
	}
	attrs := attribute.NewSet(sp.Attributes()...)
	for k, want := range map[string]attribute.Value{
		"bpf.program.id":         attribute.Int64Value(42),
		"bpf.episode.misses":     attribute.Int64Value(30),
		"bpf.episode.runs":       attribute.Int64Value(30),
		"bpf.episode.miss_ratio": attribute.Float64Value(0.5),
		"bpf.episode.peak_rate":  attribute.Float64Value(2),
		"bpf.miss.kind":          attribute.StringValue("recursion"),
		"bpf.episode.ended_by":   attribute.StringValue("quiet"),
	} {
		if v, _ := attrs.Value(attribute.Key(k)); v != want {
			t.Errorf("span %s = %v, want %v", k, v.String(), want.String())
		}
	}
	if n := len(sp.Events()); n != 2 {
		t.Errorf("%d events, want one per interval (2)", n)
	}

	// At shutdown the agent hands over the open episode.
	open.Open = false
	open.Reason = "shutdown"
	e.EndEpisodes(context.Background(), []agent.Episode{open})
	spans = rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans after shutdown, want 3", len(spans))
	}
	attrs = attribute.NewSet(spans[2].Attributes()...)
	if v, _ := attrs.Value("bpf.episode.ended_by"); v.AsString() != "shutdown" {
		t.Errorf("shutdown episode ended_by = %q", v.String())
	}
}

// The tracer provider takes the sampler and span limits internal/config
// resolved (it reads no OTEL_TRACES_SAMPLER or OTEL_*_LIMIT itself):
// always_off records no episode span; an attribute count limit of 2 keeps
// two of the span's attributes.
func TestTracerSettingsFromConfig(t *testing.T) {
	ep := agent.Episode{Source: agent.SourceRecursionMisses, ProgID: 42, ProgName: "canary", AttachType: "tp_btf", Kind: agent.MissKindRecursion,
		Start: time.Unix(2000, 0), End: time.Unix(2020, 0), Misses: 30, Runs: 30, Reason: "quiet"}
	for _, tc := range []struct {
		env        map[string]string
		spans      int
		attributes int // of the first span; -1: not checked
	}{
		{nil, 1, -1},
		{map[string]string{"OTEL_TRACES_SAMPLER": "always_off"}, 0, -1},
		{map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "2"}, 1, 2},
	} {
		o, err := config.ResolveOTel(config.MapEnv(tc.env), "", "")
		if err != nil {
			t.Fatal(err)
		}
		e, _, rec := newTestExporter(t, Config{Level: LevelProgram, OTel: o})
		s := snapshot(1)
		s.Episodes = []agent.Episode{ep}
		e.Update(context.Background(), s)
		spans := rec.Ended()
		if len(spans) != tc.spans {
			t.Errorf("%v: %d spans, want %d", tc.env, len(spans), tc.spans)
			continue
		}
		if tc.attributes >= 0 && len(spans[0].Attributes()) != tc.attributes {
			t.Errorf("%v: %d attributes, want %d", tc.env, len(spans[0].Attributes()), tc.attributes)
		}
		if tc.spans > 0 && tc.attributes < 0 && len(spans[0].Attributes()) <= 2 {
			t.Errorf("%v: %d attributes: the default limit is 128", tc.env, len(spans[0].Attributes()))
		}
	}
}

// TestScanErrorsCounted: objects a scan could not read and scans that
// failed as a whole add up in bpf.agent.scan.errors (METRICS.md, "What can
// be lost"), across snapshots: the counter is cumulative.
func TestScanErrorsCounted(t *testing.T) {
	e, r, _ := newTestExporter(t, Config{Level: LevelWorkload})
	s := snapshot(1, prog(1, 10, nil))
	s.Scan.Errors = 3
	e.Update(context.Background(), s)
	e.ScanFailed(errors.New("reading programs: permission denied"))
	s = snapshot(2, prog(1, 20, nil))
	s.Scan.Errors = 1
	e.Update(context.Background(), s)
	got, _ := collect(t, r)
	if v := value0(got["bpf.agent.scan.errors"]); v != 5 {
		t.Errorf("scan.errors = %v, want 5 (3 objects, 1 failed scan, 1 object)", v)
	}
}

// TestLossDocNamesRealTests: every test the loss table names as its proof
// exists, so a renamed or removed test cannot leave the table pointing at
// nothing.
func TestLossDocNamesRealTests(t *testing.T) {
	defined := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(lossDoc, -1)
	if len(named) == 0 {
		t.Fatal("the loss table names no test")
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("METRICS.md's loss table names %s, which no _test.go file defines", m[1])
		}
	}
}
