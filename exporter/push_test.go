package exporter

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/syncbuf"
)

// An Update that is due exports in the same wakeup, with that Update's
// data; the next ones wait for the export interval; ForceFlush and
// Shutdown export at once (Shutdown with bpf.agent.shutdown 1). The
// program-level points shrink from three to one between exports: the
// pushed destination's reused data points carry no stale series.
func TestExportsFollowUpdates(t *testing.T) {
	var out syncbuf.Buffer
	e, err := New(context.Background(), Config{Level: LevelProgram, ConsoleOut: &out,
		OTel:     config.OTel{Metrics: config.Signal{Exporter: config.ExporterConsole}, Traces: config.Signal{Exporter: config.ExporterNone}},
		Interval: time.Hour, ScanInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ctx := context.Background()

	e.Update(ctx, snapshot(1, prog(1, 100, u64(0)), prog(2, 200, u64(0)), prog(3, 300, u64(0))))
	exports := waitExports(t, &out, 1)
	if got := metricPoints(t, exports[0], "bpf.agent.scans"); len(got) != 1 || got[0] != 1 {
		t.Errorf("first export: bpf.agent.scans %v, want [1]: the export must carry the Update that started it", got)
	}
	if got := metricPoints(t, exports[0], "bpf.program.run.count"); len(got) != 3 {
		t.Errorf("first export: %d run.count points, want 3", len(got))
	}

	// Not due (the interval is an hour): no export.
	e.Update(ctx, snapshot(2, prog(1, 150, u64(0))))
	time.Sleep(300 * time.Millisecond)
	if n := len(lines(out.String())); n != 1 {
		t.Fatalf("%d exports after an Update within the export interval, want 1", n)
	}

	if err := e.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	exports = lines(out.String())
	if len(exports) != 2 {
		t.Fatalf("%d exports after ForceFlush, want 2", len(exports))
	}
	if got := metricPoints(t, exports[1], "bpf.program.run.count"); len(got) != 1 || got[0] != 10 {
		t.Errorf("after ForceFlush: run.count %v, want the one program left, [10]", got)
	}

	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	exports = lines(out.String())
	if len(exports) != 3 {
		t.Fatalf("%d exports after Shutdown, want 3", len(exports))
	}
	if got := metricPoints(t, exports[2], "bpf.agent.shutdown"); len(got) != 1 || got[0] != 1 {
		t.Errorf("last export: bpf.agent.shutdown %v, want [1]", got)
	}
}

// Which Updates export: the first, then the first at least the export
// interval after the previous export, less half a scan interval (scans
// end a few ms early or late, never half an interval).
func TestPushDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name         string
		every, scan  time.Duration
		updates      []float64
		wantExported []float64
	}{
		{"every scan, jitter", 10 * time.Second, 10 * time.Second, []float64{0, 10.2, 19.9, 30, 40.01}, []float64{0, 10.2, 19.9, 30, 40.01}},
		{"every third scan", 30 * time.Second, 10 * time.Second, []float64{0, 10.01, 20.03, 29.99, 40, 50, 60.02}, []float64{0, 29.99, 60.02}},
		{"export interval below the scan's", time.Second, 10 * time.Second, []float64{0, 10, 20}, []float64{0, 10, 20}},
		{"a missed scan", 10 * time.Second, 10 * time.Second, []float64{0, 10, 30, 40}, []float64{0, 10, 30, 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPusher(tc.every, 30*time.Second, tc.scan)
			var got []float64
			for _, u := range tc.updates {
				p.updated(at(u))
				select {
				case <-p.kick:
					got = append(got, u)
				default:
				}
			}
			if len(got) != len(tc.wantExported) {
				t.Fatalf("exported after %v, want %v", got, tc.wantExported)
			}
			for i := range got {
				if got[i] != tc.wantExported[i] {
					t.Fatalf("exported after %v, want %v", got, tc.wantExported)
				}
			}
		})
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func waitExports(t *testing.T, out *syncbuf.Buffer, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ls := lines(out.String())
		if len(ls) >= n {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d exports after 10 s, want %d", len(ls), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricPoints returns the values of a metric's points in one console
// export (the stdout exporter's JSON of the ResourceMetrics).
func metricPoints(t *testing.T, line, name string) []float64 {
	t.Helper()
	var rm struct {
		ScopeMetrics []struct {
			Metrics []struct {
				Name string
				Data struct {
					DataPoints []struct{ Value float64 }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(line), &rm); err != nil {
		t.Fatalf("console export: %v", err)
	}
	var vs []float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				for _, p := range m.Data.DataPoints {
					vs = append(vs, p.Value)
				}
			}
		}
	}
	return vs
}

// resend is the tests' Config.ResendUnchanged: long beside their 100 ms
// exports, so that a stalled test machine does not make a series due.
const resend = 3 * time.Second

// resendExporter exports to a buffer, as the console exporter, every
// 100 ms, an unchanged series every resend.
func resendExporter(t *testing.T, level Level) (*Exporter, *syncbuf.Buffer) {
	t.Helper()
	out := &syncbuf.Buffer{}
	e, err := New(context.Background(), Config{Level: level, ConsoleOut: out,
		OTel:     config.OTel{Metrics: config.Signal{Exporter: config.ExporterConsole}, Traces: config.Signal{Exporter: config.ExporterNone}},
		Interval: 100 * time.Millisecond, ScanInterval: 10 * time.Millisecond, ResendUnchanged: resend})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Shutdown(context.Background()) })
	return e, out
}

// The gauges resend as the counters do (TestUnchangedSeriesResent): a map
// key's figures go out together when one moved, the memory and
// verified-instruction series when theirs did, every one at least every
// Config.ResendUnchanged; the node's totals, from instruments, at every
// export. A scraped or manual reader gets them all at every collection
// (TestMapRollups collects with one).
func TestGaugesResent(t *testing.T) {
	e, out := resendExporter(t, LevelWorkload)
	ctx := context.Background()
	type counts struct{ maps, entries, memory, insns int }
	steps := []struct {
		pause   time.Duration // after the previous export was seen
		entries int
		want    counts
		why     string
	}{
		{0, 5, counts{1, 1, 2, 1}, "first export: every series"},
		{150 * time.Millisecond, 6, counts{1, 1, 0, 0}, "the map's count moved"},
		{150 * time.Millisecond, 6, counts{}, "nothing moved"},
		{resend + 200*time.Millisecond, 6, counts{1, 1, 2, 1}, "all due again"},
	}
	for i, st := range steps {
		// Past the export interval (100 ms) since the last export: the
		// Update exports.
		time.Sleep(st.pause)
		s := withMaps(snapshot(uint64(i+1), memProg(1, "enter", "obs", "tracer", "tracer", 10)), bpfMap(10, "events", "hash", 4096, 100, st.entries))
		e.Update(ctx, s)
		exports := waitExports(t, out, i+1)
		last := exports[i]
		got := counts{len(metricPoints(t, last, "bpf.map.memory")), len(metricPoints(t, last, "bpf.map.entries")),
			len(metricPoints(t, last, "bpf.program.memory")), len(metricPoints(t, last, "bpf.program.verified_insns"))}
		if got != st.want {
			t.Errorf("export %d (%s): map memory, map entries, program memory, verified insns points %v, want %v", i+1, st.why, got, st.want)
		}
		if n := len(metricPoints(t, last, "bpf.node.memory")); n != 2 {
			t.Errorf("export %d: %d bpf.node.memory points, want 2 at every export", i+1, n)
		}
	}
}

// A pushed series whose values did not move since the destination last
// got it is left out until Config.ResendUnchanged has passed; one that
// moved goes out at once, and the final export at shutdown has them all.
func TestUnchangedSeriesResent(t *testing.T) {
	e, out := resendExporter(t, LevelProgram)
	ctx := context.Background()
	steps := []struct {
		pause time.Duration // after the previous export was seen
		runs  [2]uint64     // of programs 1 and 2
		want  []float64     // run.count points exported
		why   string
	}{
		{0, [2]uint64{10, 20}, []float64{10, 20}, "first export: every series"},
		{150 * time.Millisecond, [2]uint64{11, 20}, []float64{11}, "only program 1 moved"},
		{150 * time.Millisecond, [2]uint64{11, 20}, nil, "nothing moved"},
		{resend + 200*time.Millisecond, [2]uint64{11, 20}, []float64{11, 20}, "both due again"},
	}
	for i, st := range steps {
		time.Sleep(st.pause) // past the export interval: the Update exports
		p1, p2 := prog(1, 100, u64(0)), prog(2, 200, u64(0))
		p1.RunCount, p2.RunCount = st.runs[0], st.runs[1]
		e.Update(ctx, snapshot(uint64(i+1), p1, p2))
		exports := waitExports(t, out, i+1)
		got := metricPoints(t, exports[i], "bpf.program.run.count")
		if !slices.Equal(got, st.want) {
			t.Errorf("export %d (%s): run.count %v, want %v", i+1, st.why, got, st.want)
		}
		// The agent's own metrics go out every time.
		if n := len(metricPoints(t, exports[i], "bpf.agent.scans")); n != 1 {
			t.Errorf("export %d: %d bpf.agent.scans points, want 1", i+1, n)
		}
	}
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	exports := lines(out.String())
	if got := metricPoints(t, exports[len(exports)-1], "bpf.program.run.count"); len(got) != 2 {
		t.Errorf("final export: run.count %v, want both programs", got)
	}
}
