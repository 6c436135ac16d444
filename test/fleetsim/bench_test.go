//go:build bench

package fleetsim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
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

// self is one of Prometheus' own metrics, summed over its labels.
func self(t testing.TB, prom *backends.Prometheus, name string) float64 {
	t.Helper()
	resp, err := httpGet("http://" + prom.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, line := range strings.Split(resp, "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		x, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			v += x
		}
	}
	return v
}

type benchPhase struct {
	rounds                      int
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
	sizes := []int{100, 300, 1000}
	if s := os.Getenv("BPFLEET_FLEET_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("BPFLEET_FLEET_SIZES=%q: %v", s, err)
			}
			sizes = append(sizes, n)
		}
	}
	t.Logf("BENCH fleetsim: %d CPUs, %s, %s", runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"), hostCPU())
	type row struct {
		n                                    int
		steady, upgrade, restart, cut, heal  benchPhase
		ruleEval                             float64
		seriesPerNode, upgradeCreatedPerNode float64
		dropped                              int
	}
	var rows []row
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			prom := backends.StartPrometheusWithRules(t, []string{"../../charts/bpfleet/files/bpfleet.rules.yaml"})
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
			r.upgradeCreatedPerNode = r.upgrade.created / float64(n)
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
			for _, nt := range f.Truth().Nodes {
				r.dropped += nt.ExportErrors
			}
			r.ruleEval = self(t, prom, "prometheus_rule_group_last_duration_seconds")
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
			t.Logf("BENCH fleetsim n=%d: series created per node: %.2f in the rolling upgrade with pod churn (6 rounds), %.2f when 100 agents restarted at once, %.2f over a 5 min cut of pool batch (%d failed exports, counted)",
				n, r.upgradeCreatedPerNode, r.restart.created/float64(n), r.cut.created/float64(n), r.dropped)
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
	}
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
