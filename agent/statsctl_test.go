package agent

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/internal/stats"
	"github.com/bpfleet/bpfleet/test/steady"
)

// skipIfStatsOn skips when stats are on without the test: the known
// answer needs stats off outside the agent's windows.
func skipIfStatsOn(t *testing.T) {
	t.Helper()
	on, err := stats.On()
	if err != nil {
		t.Skipf("cannot test-run a program: %v", err)
	}
	if on {
		t.Skip("BPF stats are held elsewhere (another tool's fd or kernel.bpf_stats_enabled): a sampled estimate is not scaled then")
	}
}

// A program fired at a known steady rate while stats are sampled (200 ms of
// every second): the extrapolated run count over 5 s is within 5% of the
// runs made, the snapshot says sampled, and outside windows the agent holds
// no fd.
func TestSampledRunCountKnownRate(t *testing.T) {
	skipIfStatsOn(t)
	const rate = 20_000.0
	sp := steady.Start(t, "steady", rate)
	id := sp.ID
	a := newTestAgentWith(t, Config{StatsMode: StatsSampled, StatsWindow: 200 * time.Millisecond, StatsPeriod: time.Second, NoIterator: true})

	s0 := scan(t, a)
	if s0.Stats.Mode != StatsSampled || s0.Stats.Window != 200*time.Millisecond || s0.Stats.Period != time.Second {
		t.Fatalf("stats state %+v: want sampled 200ms of 1s", s0.Stats)
	}
	// One period to measure a first rate, then 5 s counted.
	time.Sleep(1100 * time.Millisecond)
	scan(t, a)
	f1 := sp.Fired()
	var est uint64
	for i := 0; i < 5; i++ {
		time.Sleep(time.Second)
		s := scan(t, a)
		p := findProg(s, id)
		if p == nil {
			t.Fatalf("program %d not in the snapshot", id)
		}
		est += p.Delta.Runs
	}
	truth := sp.Fired() - f1
	errPct := 100 * math.Abs(float64(est)-float64(truth)) / float64(truth)
	t.Logf("runs made %d, sampled estimate %d: error %.2f%%", truth, est, errPct)
	if errPct > 5 {
		t.Errorf("sampled run count %d vs %d runs made: error %.1f%%, want within 5%%", est, truth, errPct)
	}
	// The kernel's own count grew only in windows: far below the truth.
	info, err := sp.Prog.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if float64(info.RunCount) > 0.5*float64(sp.Fired()) {
		t.Errorf("kernel counted %d of %d runs: stats were not off outside the windows", info.RunCount, sp.Fired())
	}
}

// off: the agent never enables stats; run counts do not grow, misses do
// (the exporter leaves the run metrics out, see exporter tests).
func TestStatsOffHoldsNothing(t *testing.T) {
	skipIfStatsOn(t)
	sp := steady.Start(t, "steady", 5000)
	id := sp.ID
	a := newTestAgentWith(t, Config{StatsMode: StatsOff, NoIterator: true})
	scan(t, a)
	time.Sleep(300 * time.Millisecond)
	s := scan(t, a)
	if s.Stats.Mode != StatsOff || s.Stats.HeldByAgent || s.Stats.Enabled {
		t.Fatalf("stats state %+v: want off, not held, not enabled", s.Stats)
	}
	p := findProg(s, id)
	if p == nil {
		t.Fatalf("program %d not in the snapshot", id)
	}
	if p.RunCount != 0 || p.Delta.Runs != 0 {
		t.Errorf("stats off, yet run count %d (delta %d)", p.RunCount, p.Delta.Runs)
	}
	if !s.StatsTax.Known || s.StatsTax.CPUShare != 0 {
		t.Errorf("stats off: tax %+v, want known and 0", s.StatsTax)
	}
}

// off: the stats-tax measurement (calibration, or the agent command's
// tax-only run) is skipped too: it would turn stats on for every program
// on the node while it measures.
func TestStatsOffMeasuresNoTax(t *testing.T) {
	skipIfStatsOn(t)
	sp := steady.Start(t, "steady", 5000)
	a := newTestAgentWith(t, Config{StatsMode: StatsOff, NoIterator: true})
	costs, err := a.CalibrateStats(context.Background(), nil)
	if err != nil || len(costs) != 0 {
		t.Errorf("CalibrateStats with stats off: %v, %v; want nothing measured", costs, err)
	}
	s := scan(t, a)
	if p := findProg(s, sp.ID); p == nil || p.RunCount != 0 {
		t.Errorf("stats off, yet the steady program's runs were counted: %+v", p)
	}
}

// Another holder (here the test itself, as another tool) is seen while the
// agent holds no fd.
func TestStatsOffSeesHolderElsewhere(t *testing.T) {
	skipIfStatsOn(t)
	fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Skipf("BPF_ENABLE_STATS: %v", err)
	}
	defer fd.Close()
	a := newTestAgentWith(t, Config{StatsMode: StatsOff, NoIterator: true})
	s := scan(t, a)
	if !s.Stats.HeldElsewhere || !s.Stats.Enabled {
		t.Errorf("stats state %+v: want held elsewhere", s.Stats)
	}
}

// The tax calibration gives xdp and tc figures and a positive tax for a
// program running at a known rate; with stats held elsewhere it says so.
func TestStatsTaxFromCalibration(t *testing.T) {
	skipIfStatsOn(t)
	sp := steady.Start(t, "steady", 20_000)
	id := sp.ID
	a := newTestAgentWith(t, Config{StatsMode: StatsAlways, NoIterator: true})
	costs, err := a.CalibrateStats(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var tc float64
	for _, c := range costs {
		if !c.Measured {
			t.Fatalf("%s: %s", c.Kind, c.Reason)
		}
		if c.Kind == "tc" {
			tc = c.TaxNs
		}
	}
	scan(t, a)
	time.Sleep(500 * time.Millisecond)
	s := scan(t, a)
	if !s.Stats.HeldByAgent {
		t.Fatalf("after calibration the agent holds no stats fd: %+v", s.Stats)
	}
	p := findProg(s, id)
	if p == nil {
		t.Fatalf("program %d not in the snapshot", id)
	}
	tax := s.StatsTax
	if !tax.Known || tax.Duty != 1 {
		t.Fatalf("tax %+v: want known, duty 1", tax)
	}
	var sf *ProgramTypeTax
	for i := range tax.ByProgramType {
		if tax.ByProgramType[i].ProgramType == p.Type {
			sf = &tax.ByProgramType[i]
		}
	}
	if sf == nil || sf.Source != "tc" {
		t.Fatalf("no %s row from the tc figure in %+v", p.Type, tax.ByProgramType)
	}
	// This program's share of the tax is its rate × the tc figure.
	if sf.RunsPerSec < p.Delta.RunsPerSec || sf.AlwaysCPUShare < p.Delta.RunsPerSec*tc/1e9*0.999 {
		t.Errorf("%s tax %+v below the program's own %.0f runs/s × %.1f ns", p.Type, sf, p.Delta.RunsPerSec, tc)
	}
	t.Logf("tax %.4f%% of a CPU; %s: %.0f runs/s × %.1f ns; agent %.4f%%", tax.CPUShare*100, p.Type, sf.RunsPerSec, sf.CostNs, s.AgentCPUShare*100)

	held, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	costs, err = a.CalibrateStats(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range costs {
		if c.Measured {
			t.Errorf("%s measured %.1f ns with stats held elsewhere", c.Kind, c.TaxNs)
		}
	}
	if s := scan(t, a); s.StatsTax.Known || s.StatsTax.Reason != "not measurable: stats held elsewhere" {
		t.Errorf("tax %+v: want not measurable", s.StatsTax)
	}
}
