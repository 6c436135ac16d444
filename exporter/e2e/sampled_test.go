package e2e

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/test/steady"
)

// manualExporter is an exporter at level whose metrics a test collects.
func manualExporter(t *testing.T, level exporter.Level, k agent.KernelInfo) (*exporter.Exporter, *sdkmetric.ManualReader) {
	t.Helper()
	var e *exporter.Exporter
	var opts []sdkmetric.ManualReaderOption
	for _, p := range exporter.Producers(&e) {
		opts = append(opts, sdkmetric.WithProducer(p))
	}
	r := sdkmetric.NewManualReader(opts...)
	e, err := exporter.New(context.Background(), exporter.Config{Level: level, Readers: []sdkmetric.Reader{r}, Kernel: k,
		OTel: config.OTel{Metrics: config.Signal{Exporter: config.ExporterNone}, Traces: config.Signal{Exporter: config.ExporterNone}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e, r
}

// exported is the value of metric name's data point whose attribute key
// is want, and whether there is one.
func exported(t *testing.T, r *sdkmetric.ManualReader, name, key string, want attribute.Value) (float64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value(attribute.Key(key)); ok && v == want {
						return float64(p.Value), true
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					return float64(p.Value), true
				}
			}
		}
	}
	return 0, false
}

// A sampled agent's exported run counter, export by export against the
// runs the kernel saw, while another holder of stats comes and goes (the
// test holds a BPF_ENABLE_STATS fd for 3 s, as a local bpfleet top would):
// at the program level and at the workload level the counter never goes
// down, an export whose interval the holder spans adds exactly the runs
// made and bpf.agent.stats.exact says 1 (and is right whenever it says
// so: another tool may hold stats on a shared machine), no other adds more
// than twice the program's rate over its interval, and the whole is within
// 5% of the runs made.
func TestSampledExportFollowsKernel(t *testing.T) {
	const rate = 20_000.0
	sp := steady.Start(t, "sampled_e2e", rate)
	a, err := agent.New(agent.Config{StatsMode: agent.StatsSampled, StatsWindow: 200 * time.Millisecond, StatsPeriod: time.Second, NoIterator: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	prog, pr := manualExporter(t, exporter.LevelProgram, a.Kernel())
	work, wr := manualExporter(t, exporter.LevelWorkload, a.Kernel())

	type export struct {
		at             time.Time
		fired          uint64
		program, total float64 // the program level's counter, the workload key's
		exact          float64
		held           bool
	}
	var exports []export
	exportOnce := func(held bool) {
		var s *agent.Snapshot
		fired := sp.Paused(func() {
			var err error
			if s, err = a.Scan(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if len(exports) == 0 && s.Stats.HeldElsewhere {
			t.Skip("BPF stats are held elsewhere (another tool's fd or kernel.bpf_stats_enabled): this test brings its own holder")
		}
		prog.Update(context.Background(), s)
		work.Update(context.Background(), s)
		p, ok := exported(t, pr, "bpf.program.run.count", "bpf.program.id", attribute.Int64Value(int64(sp.ID)))
		w, wok := exported(t, wr, "bpf.program.run.count", "bpf.program.name", attribute.StringValue("sampled_e2e"))
		x, xok := exported(t, wr, "bpf.agent.stats.exact", "", attribute.Value{})
		if !ok || !wok || !xok {
			t.Fatalf("export %d: program series %v, workload series %v, stats.exact %v", len(exports), ok, wok, xok)
		}
		exports = append(exports, export{s.Time, fired, p, w, x, held})
	}
	exportOnce(false)
	time.Sleep(1100 * time.Millisecond)
	exportOnce(false)
	steady.HolderComesAndGoes(t, exportOnce)
	exact := 0
	for i := 2; i < len(exports); i++ {
		prev, cur := exports[i-1], exports[i]
		made := float64(cur.fired - prev.fired)
		for _, c := range []struct {
			level     string
			prev, cur float64
		}{{"program", prev.program, cur.program}, {"workload", prev.total, cur.total}} {
			switch grew := c.cur - c.prev; {
			case grew < 0:
				t.Errorf("export %d, %s level: run count went down, %.0f → %.0f", i, c.level, c.prev, c.cur)
			case !(prev.held && cur.held) && grew > 2*rate*cur.at.Sub(prev.at).Seconds():
				t.Errorf("export %d, %s level: %.0f runs added in %v, over twice the rate of %.0f/s (%.0f made)", i, c.level, grew, cur.at.Sub(prev.at), rate, made)
			case prev.held && cur.held && grew != made:
				t.Errorf("export %d, %s level: stats held throughout, yet %.0f runs added for %.0f made", i, c.level, grew, made)
			}
		}
		switch {
		case prev.held && cur.held && cur.exact != 1:
			t.Errorf("export %d: stats held throughout, yet bpf.agent.stats.exact = %v", i, cur.exact)
		case cur.exact == 1 && cur.program-prev.program != made:
			// Another tool on the machine may hold stats too (a
			// sampled agent's windows): exact must then be true.
			t.Errorf("export %d: bpf.agent.stats.exact = 1, yet %.0f runs added for %.0f made", i, cur.program-prev.program, made)
		case cur.exact != 0 && cur.exact != 1:
			t.Errorf("export %d: bpf.agent.stats.exact = %v", i, cur.exact)
		}
		if prev.held && cur.held {
			exact++
		}
	}
	if exact < 5 {
		t.Errorf("only %d exports with the holder throughout: the test did not test it", exact)
	}
	first, last := exports[1], exports[len(exports)-1]
	truth := float64(last.fired - first.fired)
	for _, c := range []struct {
		level string
		est   float64
	}{{"program", last.program - first.program}, {"workload", last.total - first.total}} {
		errPct := 100 * math.Abs(c.est-truth) / truth
		t.Logf("%s level: %.0f runs exported of %.0f made, error %.2f%%", c.level, c.est, truth, errPct)
		if errPct > 5 {
			t.Errorf("%s level: %.0f runs exported of %.0f made: error %.1f%%, want within 5%%", c.level, c.est, truth, errPct)
		}
	}
	if t.Failed() {
		for i := 1; i < len(exports); i++ {
			prev, cur := exports[i-1], exports[i]
			t.Logf("export %d: %d runs made, %.0f exported, exact %v, held %v", i, cur.fired-prev.fired, cur.program-prev.program, cur.exact, cur.held)
		}
	}
}
