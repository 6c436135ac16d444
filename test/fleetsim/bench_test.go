//go:build bench

package fleetsim

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/fleetquery"
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
	rounds, overruns            int
	late                        time.Duration // the most a round started late
	bpfSeries                   float64       // bpf_* series after the phase, less before
	alerts                      string        // ALERTS firing after it, by name
	wall, cpu, sim              time.Duration
	samples, created            float64
	requests, wire              int64
	colCPU, promCPU             time.Duration
	headSeries, promRSS, colRSS float64
}

// paced runs rounds of f, each on a tick of every (0: as fast as the
// exports go), run called before each (the phase's motion), and waits out
// the last round's tick: a phase of n rounds lasts n ticks of wall time
// unless a round overran its tick (counted, in the Pacer).
func paced(t *testing.T, f *Fleet, every time.Duration, rounds int, run func(i int)) *Pacer {
	t.Helper()
	ctx := context.Background()
	pace := &Pacer{Every: every}
	for i := range rounds {
		if err := pace.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if run != nil {
			run(i)
		}
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := pace.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if pace.Overruns > 0 {
		t.Logf("BENCH fleetsim: %d of %d rounds overran their %v tick (the most one started late: %v)", pace.Overruns, rounds, every, pace.Late.Round(time.Millisecond))
	}
	return pace
}

// measure runs rounds of f on a tick of every (paced; after each, run is
// called first: the phase's motion) and what they cost.
func measure(t *testing.T, f *Fleet, prom *backends.Prometheus, col *backends.Collector, every time.Duration, rounds int, run func(i int)) benchPhase {
	t.Helper()
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
	pace := paced(t, f, every, rounds, run)
	p.overruns, p.late = pace.Overruns, pace.Late
	p.wall, p.cpu, p.sim = time.Since(start), processCPU()-cpu0, f.SimCPU()-sim0
	// Prometheus' and the Collector's CPU at the end of the last tick,
	// before the checks below query it; unpaced, once the last round's
	// exports are appended.
	usage := func() {
		pc1 := self(t, prom, "process_cpu_seconds_total")
		var colCPU1 time.Duration
		p.colRSS, colCPU1 = procStat(t, col.PID())
		p.colCPU = colCPU1 - colCPU0
		p.promCPU = time.Duration((pc1 - pc0) * 1e9)
	}
	if every > 0 {
		usage()
	}
	matchTruth(t, prom, f.Truth()) // settled: every export appended
	if every == 0 {
		usage()
	}
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
	for _, pool := range f.cfg.Pools {
		q, w, _ := f.Bytes(pool.Name)
		p.requests, p.wire = p.requests+q, p.wire+w
	}
	p.requests -= q0
	p.wire -= w0
	return p
}

// loadAvg is /proc/loadavg's first three fields: how busy the machine
// was, as the CPU figures are the processes' own.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// benchEval is the rules' evaluation interval: 1 m (Prometheus' default,
// what a fleet runs) unless BPFLEET_FLEET_EVAL says otherwise.
func benchEval() (time.Duration, error) {
	s := os.Getenv("BPFLEET_FLEET_EVAL")
	if s == "" {
		return time.Minute, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("BPFLEET_FLEET_EVAL=%q: want a positive duration such as 1m", s)
	}
	return d, nil
}

// alertsFiring is the alerts firing now, by name: how many of each.
func alertsFiring(t *testing.T, prom *backends.Prometheus) map[string]float64 {
	t.Helper()
	return query(t, prom, `count by (alertname) (ALERTS{alertstate="firing"})`, "alertname")
}

// TestBenchFleetSim is make bench BENCH=fleet's fleet of simulated nodes
// (issue 45, item 4): 100, 300 and 1,000 nodes replaying the recorded
// kernels through a real Collector into a real Prometheus, each size on
// fresh backends, the rounds paced on the wall clock (BenchPace: one
// every 10 s, as the agents export) and the shipped rules evaluated every
// minute (benchEval): 18 steady rounds without rules, 18 with them (3
// minutes each: what the rules cost is the difference), a rolling upgrade
// with pod churn, 100 agents restarted at once, one pool cut off for 5
// minutes (30 rounds) and healed. After each phase Prometheus holds the
// truth; the cut raises no agent alert and leaves the alerts as they were.
func TestBenchFleetSim(t *testing.T) {
	sizes, err := BenchSizes()
	if err != nil {
		t.Fatal(err)
	}
	eval, err := benchEval()
	if err != nil {
		t.Fatal(err)
	}
	every, err := BenchPace(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	steadyRounds := 18
	if s := os.Getenv("BPFLEET_FLEET_STEADY"); s != "" {
		if steadyRounds, err = strconv.Atoi(s); err != nil || steadyRounds < 1 {
			t.Fatalf("BPFLEET_FLEET_STEADY=%q: want a number of rounds", s)
		}
	}
	t.Logf("BENCH fleetsim: %d CPUs, %s, %s, rounds every %v (0: unpaced), rules evaluated every %v, steady phases of %d rounds; load average %s",
		runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), hostCPU(), every, eval, steadyRounds, loadAvg())
	type row struct {
		n                                          int
		quiet, steady, upgrade, restart, cut, heal benchPhase
		ruleEval                                   float64
		seriesPerNode                              float64
		dropped                                    int
		load                                       string
	}
	var rows []row
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			prom := backends.StartPrometheusWithRulesEvery(t, nil, eval)
			col := backends.StartCollector(t, prom, backends.StartJaeger(t))
			f, err := New(ctx, benchFleet("http://"+col.OTLPHTTP, n))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			r := row{n: n}
			// Warm-up: the first export creates every series.
			measure(t, f, prom, col, every, 2, nil)
			// The same steady fleet without rules, then with them: the
			// rules' CPU (their evaluations and the series they write) is
			// the difference.
			r.quiet = measure(t, f, prom, col, every, steadyRounds, nil)
			if err := prom.SetRules(shippedRules); err != nil {
				t.Fatal(err)
			}
			r.steady = measure(t, f, prom, col, every, steadyRounds, nil)
			r.seriesPerNode = r.steady.headSeries / float64(n)
			f.Upgrade("on_tracepoint", "00c0ffee00c0ffee", max(1, n/5))
			r.upgrade = measure(t, f, prom, col, every, 6, nil)
			r.restart = measure(t, f, prom, col, every, 2, func(i int) {
				if i == 0 {
					if err := f.RestartAgents(ctx, f.Nodes()[:min(100, n)]...); err != nil {
						t.Fatal(err)
					}
				}
			})
			before := alertsFiring(t, prom)
			cutStart := time.Now()
			var absentSeen string
			r.cut = measure(t, f, prom, col, every, 30, func(i int) {
				switch i {
				case 0:
					if err := f.Cut("batch", true); err != nil {
						t.Fatal(err)
					}
				case 20:
					// 200 s into the cut (20 ticks): fleet nodes' question,
					// with --window 2m (12 ticks), sees the cut pool absent.
					if every > 0 {
						absentSeen = checkAbsent(t, prom, f.Truth(), 12*every)
					} else {
						absentSeen = "fleet nodes' absent agents not checked: the rounds are unpaced, a cut lasts no time"
					}
				}
			})
			if err := f.Cut("batch", false); err != nil {
				t.Fatal(err)
			}
			// 9 rounds: an evaluation (1 m) after the healed pool's
			// second export, when increase() over it has two samples again.
			r.heal = measure(t, f, prom, col, every, 9, nil)
			after := alertsFiring(t, prom)
			checkCutAlerts(t, prom, n, time.Since(cutStart), before, after)
			tr := f.Truth()
			for _, nt := range tr.Nodes {
				r.dropped += nt.ExportErrors
			}
			// What the agents counted of it (bpf.agent.export.errors):
			// nothing lost uncounted.
			counted := query(t, prom, `sum `+fresh(`bpf_agent_export_errors_total{signal="metrics"}`, tr.RoundTimes[len(tr.RoundTimes)-1]))[""]
			if counted != float64(r.dropped) {
				t.Errorf("after the cut the agents counted %.0f failed exports in bpf.agent.export.errors, the fleet failed %d: exports lost uncounted", counted, r.dropped)
			}
			r.ruleEval = self(t, prom, "prometheus_rule_group_last_duration_seconds")
			groups := ruleGroups(t, prom)
			r.load = loadAvg()
			rows = append(rows, r)
			st, q := r.steady, r.quiet
			per := func(d time.Duration, p benchPhase) float64 {
				return float64(d.Microseconds()) / 1000 / float64(p.rounds) / float64(n)
			}
			t.Logf("BENCH fleetsim n=%d: %.1f series/node; %.1f samples/s/node at a 10 s interval; %.2f KB/node/export on the wire (%d requests); load average %s",
				n, r.seriesPerNode, st.samples/float64(st.rounds)/float64(n)/10, float64(st.wire)/float64(st.requests)/1000, st.requests, r.load)
			t.Logf("BENCH fleetsim n=%d: Prometheus %.3f ms CPU per node export with the rules, %.3f without (the same %d rounds, %v of wall time each): the rules %.3f ms, the rest (ingest, background) %.3f ms",
				n, per(st.promCPU, st), per(q.promCPU, q), st.rounds, st.wall.Round(time.Second), per(st.promCPU, st)-per(q.promCPU, q), per(q.promCPU, q))
			t.Logf("BENCH fleetsim n=%d: Collector %.3f ms CPU per node export (%.3f without rules), %.0f MB RSS (%.1f MB per 100 nodes); Prometheus %.0f MB RSS, %.0f MB per million series",
				n, per(st.colCPU, st), per(q.colCPU, q), st.colRSS/1e6, st.colRSS/1e6/float64(n)*100, st.promRSS/1e6, st.promRSS/1e6/(st.headSeries/1e6))
			t.Logf("BENCH fleetsim n=%d: Prometheus CPU per million series per round: %.2f s; rule evaluation %.1f ms (all groups, last evaluation, wall)",
				n, st.promCPU.Seconds()/float64(st.rounds)/(st.headSeries/1e6), r.ruleEval*1000)
			t.Logf("BENCH fleetsim n=%d: exporters %.2f ms CPU per node export (simulator's own %.2f ms left out), round wall %.0f ms of a %v tick; overruns: steady %d, without rules %d, upgrade %d, restart %d, cut %d, healed %d",
				n, per(st.cpu-st.sim, st), per(st.sim, st), float64(st.wall.Milliseconds())/float64(st.rounds), every,
				st.overruns, q.overruns, r.upgrade.overruns, r.restart.overruns, r.cut.overruns, r.heal.overruns)
			t.Logf("BENCH fleetsim n=%d: agent series new per node: %.2f in the rolling upgrade with pod churn (6 rounds), %.2f when 100 agents restarted at once, %.2f over a 5 min cut of pool batch (%d failed exports, counted), %.2f after it; all series created (rules' and ALERTS included): %.0f, %.0f, %.0f, %.0f",
				n, r.upgrade.bpfSeries/float64(n), r.restart.bpfSeries/float64(n), r.cut.bpfSeries/float64(n), r.dropped, r.heal.bpfSeries/float64(n),
				r.upgrade.created, r.restart.created, r.cut.created, r.heal.created)
			t.Logf("BENCH fleetsim n=%d: after the cut Prometheus holds the truth; the agents counted %.0f failed exports in bpf.agent.export.errors, the fleet failed %d; %s", n, counted, r.dropped, absentSeen)
			t.Logf("BENCH fleetsim n=%d: alerts firing after steady: [%s]; upgrade: [%s]; restart: [%s]; cut: [%s]; healed: [%s]",
				n, r.steady.alerts, r.upgrade.alerts, r.restart.alerts, r.cut.alerts, r.heal.alerts)
			var gs []string
			for g, v := range groups {
				gs = append(gs, fmt.Sprintf("%s %.1f ms", g, v*1000))
			}
			slices.Sort(gs)
			t.Logf("BENCH fleetsim n=%d: rule groups' last evaluation: %s", n, strings.Join(gs, ", "))
			var rs []string
			for _, c := range dearestRules(t, prom, 8, 1) {
				rs = append(rs, fmt.Sprintf("%s %.1f ms (%.3f ms per node)", c.Name, c.Seconds*1000, c.Seconds*1000/float64(n)))
			}
			t.Logf("BENCH fleetsim n=%d: dearest rules (their last evaluation, wall): %s", n, strings.Join(rs, ", "))
		})
	}
	// Per node export, and what one more node costs: the difference in CPU
	// per round between two sizes over the difference in nodes (each
	// process' own per-second work, the same at every size, cancels).
	type split struct{ total, rules, rest, col float64 }
	perRound := func(r row) split {
		s, q := r.steady, r.quiet
		tot := s.promCPU.Seconds() * 1000 / float64(s.rounds)
		rest := q.promCPU.Seconds() * 1000 / float64(q.rounds)
		return split{tot, tot - rest, rest, s.colCPU.Seconds() * 1000 / float64(s.rounds)}
	}
	t.Logf("BENCH fleetsim table: nodes | Prometheus ms CPU per node export: total | rules | rest (ingest, background) | Collector | exporters | overruns (steady, without rules) | load average")
	for _, r := range rows {
		c, n := perRound(r), float64(r.n)
		t.Logf("BENCH fleetsim table: %d | %.3f | %.3f | %.3f | %.3f | %.3f | %d, %d | %s",
			r.n, c.total/n, c.rules/n, c.rest/n, c.col/n, (r.steady.cpu-r.steady.sim).Seconds()*1000/float64(r.steady.rounds)/n,
			r.steady.overruns, r.quiet.overruns, r.load)
	}
	var pairs [][2]row
	for i := 1; i < len(rows); i++ {
		pairs = append(pairs, [2]row{rows[i-1], rows[i]})
	}
	if len(rows) > 2 {
		pairs = append(pairs, [2]row{rows[0], rows[len(rows)-1]})
	}
	for _, ab := range pairs {
		a, b := ab[0], ab[1]
		ca, cb, dn := perRound(a), perRound(b), float64(b.n-a.n)
		t.Logf("BENCH fleetsim marginal %d -> %d nodes, ms CPU per node export: Prometheus %.3f (rules %.3f, rest %.3f), Collector %.3f",
			a.n, b.n, (cb.total-ca.total)/dn, (cb.rules-ca.rules)/dn, (cb.rest-ca.rest)/dn, (cb.col-ca.col)/dn)
	}
	if len(rows) > 1 {
		a, b := rows[0], rows[len(rows)-1]
		ratio := func(x, y float64) float64 { return y / x }
		pa := func(r row, d time.Duration) float64 { return float64(d) / float64(r.steady.rounds) / float64(r.n) }
		ca, cb := perRound(a), perRound(b)
		na, nb := float64(a.n), float64(b.n)
		t.Logf("BENCH fleetsim per-node cost %d -> %d nodes: series %.2fx, bytes per export %.2fx, Collector CPU %.2fx, Prometheus CPU %.2fx (rules %.2fx, rest %.2fx), exporter CPU %.2fx (goal: within 1.1x)",
			a.n, b.n, ratio(a.seriesPerNode, b.seriesPerNode),
			ratio(float64(a.steady.wire)/float64(a.steady.requests), float64(b.steady.wire)/float64(b.steady.requests)),
			ratio(pa(a, a.steady.colCPU), pa(b, b.steady.colCPU)), ratio(ca.total/na, cb.total/nb), ratio(ca.rules/na, cb.rules/nb), ratio(ca.rest/na, cb.rest/nb),
			ratio(pa(a, a.steady.cpu-a.steady.sim), pa(b, b.steady.cpu-b.steady.sim)))
		// Memory grows from a base each process has with no fleet at all:
		// what one more node or million series costs is the difference
		// between the sizes.
		t.Logf("BENCH fleetsim marginal memory %d -> %d nodes: Collector %.1f MB per 100 nodes; Prometheus %.0f MB per million series (%.0f -> %.0f series)",
			a.n, b.n, (b.steady.colRSS-a.steady.colRSS)/1e6/float64(b.n-a.n)*100,
			(b.steady.promRSS-a.steady.promRSS)/1e6/((b.steady.headSeries-a.steady.headSeries)/1e6), a.steady.headSeries, b.steady.headSeries)
	}
}

// checkAbsent asks fleet nodes' question (fleetquery's last seen, the
// rule `bpfleet fleet nodes` applies: no export in the window) and checks
// that the agents it finds absent are those the truth says are: the cut
// pool's.
func checkAbsent(t *testing.T, prom *backends.Prometheus, tr *Truth, window time.Duration) string {
	t.Helper()
	p := fleetquery.Params{Sel: fleetquery.JobSel(fleetquery.DefaultJob), Range: "3600s", RangeSeconds: "3600", Window: fmt.Sprintf("%.0fs", window.Seconds()), Step: "10s"}
	now := time.Now()
	seen := query(t, prom, p.LastSeen(), fleetquery.Instance)
	var got, want []string
	for node, ts := range seen {
		if now.Sub(time.UnixMilli(int64(ts*1000))) > window {
			got = append(got, node)
		}
	}
	for _, nt := range tr.Nodes {
		if nt.State == StateAbsent && nt.Left < 0 {
			want = append(want, nt.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("during the cut fleet nodes' question (no export in %v) finds %d agents absent, the truth %d: got %.200v, want %.200v", window, len(got), len(want), got, want)
	}
	return fmt.Sprintf("during the cut fleet nodes' question (no export in %v) found the %d agents absent that the truth has cut off", window, len(got))
}

// checkCutAlerts checks the alerts over a pool's 5-minute cut and its
// healing (span: their wall time), as a fleet would see them: the cut
// pool's agents are fine, only their exports fail, so no
// BPFleetAgentStalled or BPFleetAgentCrashed; BPFleetAgentDown is "sent in
// the last hour and nothing in the 5-minute lookback" held for 5 minutes,
// and the cut pool's last samples leave the lookback 5 minutes after its
// last export, 10 s before the healed pool's next: at most one 1-minute
// evaluation sees them gone (pending), none holds it 5 minutes, so it never
// fires; after healing the alerts firing are those firing before the cut,
// none doubled.
func checkCutAlerts(t *testing.T, prom *backends.Prometheus, n int, span time.Duration, before, after map[string]float64) {
	t.Helper()
	win := fmt.Sprintf("%ds", int(span.Seconds())+1)
	agent := query(t, prom, `max by (alertname, instance) (max_over_time(ALERTS{alertname=~"BPFleetAgent(Stalled|Crashed|Down)", alertstate="firing"}[`+win+`]))`, "alertname", "instance")
	if len(agent) > 0 {
		var fired []string
		for k := range agent {
			fired = append(fired, k)
		}
		slices.Sort(fired)
		t.Errorf("n=%d: agent alerts fired over the cut and its healing (its agents were fine, their exports failed): %.300v", n, fired)
	}
	pending := query(t, prom, `count(max_over_time(ALERTS{alertname="BPFleetAgentDown", alertstate="pending"}[`+win+`]))`)[""]
	if !maps.Equal(before, after) {
		t.Errorf("n=%d: alerts firing before the cut %v, after healing %v: want the same, none doubled", n, before, after)
	}
	t.Logf("BENCH fleetsim n=%d: over the cut (30 rounds) and its healing (%v): no BPFleetAgentStalled, Crashed or Down fired; BPFleetAgentDown pending for %.0f agents; alerts firing before the cut %v, after healing the same", n, span.Round(time.Second), pending, before)
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

// self is one of Prometheus' own metrics, summed over its labels.
func self(t testing.TB, prom *backends.Prometheus, name string) float64 {
	t.Helper()
	return vmSelf(t, prom.Addr, name)
}

// vmSelf sums one of a process' own metrics (Prometheus', a storage
// node's, vmagent's) from its /metrics at addr.
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

func httpGet(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
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
	every, err := BenchPace(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BENCH fleetsim-vm: rounds every %v (0: unpaced); load average %s", every, loadAvg())
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
			paced(t, f, every, 2, nil)
			matchTruth(t, vm, f.Truth())
			cpu0, _, acpu0, _ := usage()
			// The steady phase of TestBenchFleetSim's length: per-second
			// background work weighs as it does there.
			const rounds = 18
			pace := paced(t, f, every, rounds, nil)
			matchTruth(t, vm, f.Truth())
			cpu1, rss, acpu1, arss := usage()
			series := query(t, vm, bpfSeries)[""]
			t.Logf("BENCH fleetsim-vm n=%d: %.1f series/node; 2 storage nodes (replicated) %.2f ms CPU per node export together, RSS %.0f MB together (%.0f MB per million series per node); vmagent %.2f ms CPU per node export, %.0f MB RSS; %d of %d rounds overran the tick; load average %s",
				n, series/float64(n), (cpu1-cpu0)*1000/rounds/float64(n), rss/1e6, rss/2/1e6/(series/1e6), (acpu1-acpu0)*1000/rounds/float64(n), arss/1e6, pace.Overruns, rounds, loadAvg())
			f.Upgrade("on_tracepoint", "00c0ffee00c0ffee", max(1, n/5))
			paced(t, f, every, 6, nil)
			if err := f.RestartAgents(ctx, f.Nodes()[:min(100, n)]...); err != nil {
				t.Fatal(err)
			}
			paced(t, f, every, 2, nil)
			matchTruth(t, vm, f.Truth())
			t.Logf("BENCH fleetsim-vm n=%d: after the rolling upgrade with pod churn and 100 agents restarted at once VictoriaMetrics holds the truth; agent series new per node %.2f",
				n, (query(t, vm, bpfSeries)[""]-series)/float64(n))
		})
	}
}
