//go:build bench

package fleetsim

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
)

// benchFleet is the bench's fleet of n nodes: the short test's three
// pools, 8 pods a node in the CNI pool.
func benchFleet(endpoint string, n int) Config {
	c := shortFleet(endpoint, n)
	c.Pools[0].Pods = 8
	c.PodChurn = 0.05
	return c
}

// procStat is a process's resident memory (bytes) and CPU time, from /proc.
func procStat(t testing.TB, pid int) (rss float64, cpu time.Duration) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			rss = float64(kb) * 1024
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// After the command's closing parenthesis, utime and stime are the
	// 12th and 13th fields, in clock ticks (100 Hz).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return rss, time.Duration(ut+st) * 10 * time.Millisecond
}

type benchPhase struct {
	rounds                      int
	bpfSeries                   float64 // bpf_* series after the phase, less before
	alerts                      string  // ALERTS firing after it, by name
	wall, cpu, sim              time.Duration
	samples, created            float64
	requests, wire              int64
	colCPU, promCPU             time.Duration
	headSeries, promRSS, colRSS float64
}

// measure runs rounds of f (after each, run is called first: the phase's
// motion) and what they cost.
func measure(t *testing.T, f *Fleet, prom *backends.Prometheus, col *backends.Collector, rounds int, run func(i int)) benchPhase {
	t.Helper()
	ctx := context.Background()
	p := benchPhase{rounds: rounds}
	s0, c0 := self(t, prom, "prometheus_tsdb_head_samples_appended_total"), self(t, prom, "prometheus_tsdb_head_series_created_total")
	// The agents' series only: the rules' outputs and ALERTS are counted
	// apart. OTLP writes no staleness markers, so a series stays in the
	// 5-minute lookback and one that came in the phase shows here.
	const bpfSeries = `count({__name__=~"bpf_.+"})`
	b0 := query(t, prom, bpfSeries)[""]
	_, colCPU0 := procStat(t, col.PID())
	pc0 := self(t, prom, "process_cpu_seconds_total")
	var q0, w0 int64
	for _, pool := range f.cfg.Pools {
		q, w, _ := f.Bytes(pool.Name)
		q0, w0 = q0+q, w0+w
	}
	sim0 := f.SimCPU()
	start, cpu0 := time.Now(), processCPU()
	for i := range rounds {
		if run != nil {
			run(i)
		}
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p.wall, p.cpu, p.sim = time.Since(start), processCPU()-cpu0, f.SimCPU()-sim0
	matchTruth(t, prom, f.Truth()) // settled: every export appended
	p.samples = self(t, prom, "prometheus_tsdb_head_samples_appended_total") - s0
	p.created = self(t, prom, "prometheus_tsdb_head_series_created_total") - c0
	p.bpfSeries = query(t, prom, bpfSeries)[""] - b0
	var firing []string
	for name, v := range query(t, prom, `count by (alertname) (ALERTS{alertstate="firing"})`, "alertname") {
		firing = append(firing, fmt.Sprintf("%s=%v", name, v))
	}
	slices.Sort(firing)
	p.alerts = strings.Join(firing, " ")
	p.headSeries = self(t, prom, "prometheus_tsdb_head_series")
	p.promRSS = self(t, prom, "process_resident_memory_bytes")
	p.promCPU = time.Duration((self(t, prom, "process_cpu_seconds_total") - pc0) * 1e9)
	var colCPU1 time.Duration
	p.colRSS, colCPU1 = procStat(t, col.PID())
	p.colCPU = colCPU1 - colCPU0
	for _, pool := range f.cfg.Pools {
		q, w, _ := f.Bytes(pool.Name)
		p.requests, p.wire = p.requests+q, p.wire+w
	}
	p.requests -= q0
	p.wire -= w0
	return p
}

// TestBenchFleetSim is make bench BENCH=fleet's fleet of simulated nodes
// (issue 45, item 4): 100, 300 and 1,000 nodes replaying the recorded
// kernels through a real Collector into a real Prometheus evaluating the
// shipped rules, each size on fresh backends: steady rounds, a rolling
// upgrade with pod churn, 100 agents restarted at once, one pool cut off
// for 5 simulated minutes (30 rounds). After each phase Prometheus holds
// the truth.
func TestBenchFleetSim(t *testing.T) {
	sizes, err := BenchSizes()
	if err != nil {
		t.Fatal(err)
	}
	// The rules are evaluated every second unless BPFLEET_FLEET_EVAL says
	// otherwise (1m: Prometheus' default, what a fleet runs): the rounds
	// are compressed in time (a round of 10 simulated seconds takes what
	// its exports take), so at 1 s a larger fleet's longer rounds hold more
	// evaluations each, and the rules' cost per node export grows with the
	// fleet though each evaluation costs the same per node
	// (docs/performance.md). At 1 m the phases' alerts are not those of a
	// 1 s evaluation: they come from fewer evaluations.
	eval := time.Second
	if s := os.Getenv("BPFLEET_FLEET_EVAL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("BPFLEET_FLEET_EVAL=%q: want a positive duration such as 1m", s)
		}
		eval = d
	}
	t.Logf("BENCH fleetsim: %d CPUs, %s, %s, rules evaluated every %v", runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), hostCPU(), eval)
	type row struct {
		n                                   int
		steady, upgrade, restart, cut, heal benchPhase
		ruleEval                            float64
		seriesPerNode                       float64
		dropped                             int
	}
	var rows []row
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			prom := backends.StartPrometheusWithRulesEvery(t, []string{"../../charts/bpfleet/files/bpfleet.rules.yaml"}, eval)
			col := backends.StartCollector(t, prom, backends.StartJaeger(t))
			f, err := New(ctx, benchFleet("http://"+col.OTLPHTTP, n))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			r := row{n: n}
			// Warm-up: the first export creates every series.
			measure(t, f, prom, col, 2, nil)
			r.steady = measure(t, f, prom, col, 5, nil)
			r.seriesPerNode = r.steady.headSeries / float64(n)
			f.Upgrade("on_tracepoint", "00c0ffee00c0ffee", max(1, n/5))
			r.upgrade = measure(t, f, prom, col, 6, nil)
			r.restart = measure(t, f, prom, col, 2, func(i int) {
				if i == 0 {
					if err := f.RestartAgents(ctx, f.Nodes()[:min(100, n)]...); err != nil {
						t.Fatal(err)
					}
				}
			})
			r.cut = measure(t, f, prom, col, 30, func(i int) {
				if i == 0 {
					f.Cut("batch", true)
				}
			})
			f.Cut("batch", false)
			r.heal = measure(t, f, prom, col, 2, nil)
			tr := f.Truth()
			for _, nt := range tr.Nodes {
				r.dropped += nt.ExportErrors
			}
			// What the agents counted of it (bpf.agent.export.errors):
			// nothing lost uncounted.
			counted := query(t, prom, `sum `+fresh(`bpf_agent_export_errors_total{signal="metrics"}`, tr.RoundTimes[len(tr.RoundTimes)-1]))[""]
			r.ruleEval = self(t, prom, "prometheus_rule_group_last_duration_seconds")
			groups := ruleGroups(t, prom)
			rows = append(rows, r)
			st := r.steady
			per := func(d time.Duration, p benchPhase) float64 {
				return float64(d.Microseconds()) / 1000 / float64(p.rounds) / float64(n)
			}
			t.Logf("BENCH fleetsim n=%d: %.1f series/node; %.1f samples/s/node at a 10 s interval; %.2f KB/node/export on the wire (%d requests)",
				n, r.seriesPerNode, st.samples/float64(st.rounds)/float64(n)/10, float64(st.wire)/float64(st.requests)/1000, st.requests)
			t.Logf("BENCH fleetsim n=%d: Collector %.2f ms CPU per node export, %.0f MB RSS (%.1f MB per 100 nodes); Prometheus %.2f ms CPU per node export, %.0f MB RSS, %.0f MB per million series",
				n, per(st.colCPU, st), st.colRSS/1e6, st.colRSS/1e6/float64(n)*100, per(st.promCPU, st), st.promRSS/1e6, st.promRSS/1e6/(st.headSeries/1e6))
			t.Logf("BENCH fleetsim n=%d: Prometheus CPU per million series per round: %.2f s; rule evaluation %.1f ms per round (all groups)",
				n, st.promCPU.Seconds()/float64(st.rounds)/(st.headSeries/1e6), r.ruleEval*1000)
			t.Logf("BENCH fleetsim n=%d: exporters %.2f ms CPU per node export (simulator's own %.2f ms left out), round wall %.0f ms",
				n, per(st.cpu-st.sim, st), per(st.sim, st), float64(st.wall.Milliseconds())/float64(st.rounds))
			t.Logf("BENCH fleetsim n=%d: agent series new per node: %.2f in the rolling upgrade with pod churn (6 rounds), %.2f when 100 agents restarted at once, %.2f over a 5 min cut of pool batch (%d failed exports, counted), %.2f after it; all series created (rules' and ALERTS included): %.0f, %.0f, %.0f, %.0f",
				n, r.upgrade.bpfSeries/float64(n), r.restart.bpfSeries/float64(n), r.cut.bpfSeries/float64(n), r.dropped, r.heal.bpfSeries/float64(n),
				r.upgrade.created, r.restart.created, r.cut.created, r.heal.created)
			t.Logf("BENCH fleetsim n=%d: after the cut Prometheus holds the truth; the agents counted %.0f failed exports in bpf.agent.export.errors, the fleet failed %d", n, counted, r.dropped)
			t.Logf("BENCH fleetsim n=%d: alerts firing after steady: [%s]; upgrade: [%s]; restart: [%s]; cut: [%s]; healed: [%s]",
				n, r.steady.alerts, r.upgrade.alerts, r.restart.alerts, r.cut.alerts, r.heal.alerts)
			var gs []string
			for g, v := range groups {
				gs = append(gs, fmt.Sprintf("%s %.1f ms", g, v*1000))
			}
			slices.Sort(gs)
			t.Logf("BENCH fleetsim n=%d: rule groups' last evaluation: %s", n, strings.Join(gs, ", "))
			var rs []string
			for _, c := range dearestRules(t, prom, 8, 5) {
				rs = append(rs, fmt.Sprintf("%s %.1f ms (%.3f ms per node)", c.Name, c.Seconds*1000, c.Seconds*1000/float64(n)))
			}
			t.Logf("BENCH fleetsim n=%d: dearest rules (median of 5 reads of their last evaluation): %s", n, strings.Join(rs, ", "))
		})
	}
	if len(rows) > 1 {
		a, b := rows[0], rows[len(rows)-1]
		ratio := func(x, y float64) float64 { return y / x }
		pa := func(r row, d time.Duration) float64 { return float64(d) / float64(r.steady.rounds) / float64(r.n) }
		t.Logf("BENCH fleetsim per-node cost %d -> %d nodes: series %.2fx, bytes per export %.2fx, Collector CPU %.2fx, Prometheus CPU %.2fx, exporter CPU %.2fx (goal: within 1.1x)",
			a.n, b.n, ratio(a.seriesPerNode, b.seriesPerNode),
			ratio(float64(a.steady.wire)/float64(a.steady.requests), float64(b.steady.wire)/float64(b.steady.requests)),
			ratio(pa(a, a.steady.colCPU), pa(b, b.steady.colCPU)), ratio(pa(a, a.steady.promCPU), pa(b, b.steady.promCPU)),
			ratio(pa(a, a.steady.cpu-a.steady.sim), pa(b, b.steady.cpu-b.steady.sim)))
		// Memory grows from a base each process has with no fleet at all:
		// what one more node or million series costs is the difference
		// between the sizes.
		t.Logf("BENCH fleetsim marginal memory %d -> %d nodes: Collector %.1f MB per 100 nodes; Prometheus %.0f MB per million series (%.0f -> %.0f series)",
			a.n, b.n, (b.steady.colRSS-a.steady.colRSS)/1e6/float64(b.n-a.n)*100,
			(b.steady.promRSS-a.steady.promRSS)/1e6/((b.steady.headSeries-a.steady.headSeries)/1e6), a.steady.headSeries, b.steady.headSeries)
	}
}

// ruleGroups is each rule group's last evaluation time, from Prometheus'
// /metrics.
func ruleGroups(t testing.TB, prom *backends.Prometheus) map[string]float64 {
	t.Helper()
	body, err := httpGet("http://" + prom.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "prometheus_rule_group_last_duration_seconds{") {
			continue
		}
		_, g, _ := strings.Cut(line, `rule_group="`)
		g, _, _ = strings.Cut(g, `"`)
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[g[strings.LastIndexByte(g, ';')+1:]] = v
		}
	}
	return out
}

func hostCPU() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}

// vmSelf sums one of a VictoriaMetrics process' own metrics (a storage
// node's, vmagent's) from its /metrics.
func vmSelf(t testing.TB, addr, name string) float64 {
	t.Helper()
	body, err := httpGet("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if x, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			v += x
		}
	}
	return v
}

// TestBenchFleetSimVM is the same fleet through the gateway Collector into
// the replicated two-node VictoriaMetrics (vmagent writing to both storage
// nodes, reads through vmauth): steady rounds, the rolling upgrade with pod
// churn and 100 agents restarted at once, the truth checked on
// VictoriaMetrics after each; the storage nodes' and vmagent's CPU and
// memory.
func TestBenchFleetSimVM(t *testing.T) {
	sizes, err := BenchSizes()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
			col := backends.StartGateway(t, nil, vm.OTLPEndpoint())
			f, err := New(ctx, benchFleet("http://"+col.OTLPHTTP, n))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			usage := func() (cpu, rss, agentCPU, agentRSS float64) {
				for _, node := range vm.Nodes {
					cpu += vmSelf(t, node.Addr, "process_cpu_seconds_total")
					rss += vmSelf(t, node.Addr, "process_resident_memory_bytes")
				}
				return cpu, rss, vmSelf(t, vm.AgentAddr, "process_cpu_seconds_total"), vmSelf(t, vm.AgentAddr, "process_resident_memory_bytes")
			}
			const bpfSeries = `count({__name__=~"bpf_.+"})`
			for range 2 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			matchTruth(t, vm, f.Truth())
			cpu0, _, acpu0, _ := usage()
			const rounds = 5
			for range rounds {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			matchTruth(t, vm, f.Truth())
			cpu1, rss, acpu1, arss := usage()
			series := query(t, vm, bpfSeries)[""]
			t.Logf("BENCH fleetsim-vm n=%d: %.1f series/node; 2 storage nodes (replicated) %.2f ms CPU per node export together, RSS %.0f MB together (%.0f MB per million series per node); vmagent %.2f ms CPU per node export, %.0f MB RSS",
				n, series/float64(n), (cpu1-cpu0)*1000/rounds/float64(n), rss/1e6, rss/2/1e6/(series/1e6), (acpu1-acpu0)*1000/rounds/float64(n), arss/1e6)
			f.Upgrade("on_tracepoint", "00c0ffee00c0ffee", max(1, n/5))
			for range 6 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.RestartAgents(ctx, f.Nodes()[:min(100, n)]...); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			matchTruth(t, vm, f.Truth())
			t.Logf("BENCH fleetsim-vm n=%d: after the rolling upgrade with pod churn and 100 agents restarted at once VictoriaMetrics holds the truth; agent series new per node %.2f",
				n, (query(t, vm, bpfSeries)[""]-series)/float64(n))
		})
	}
}
