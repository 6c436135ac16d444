//go:build bench && !lean

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/fleetquery"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/fleetsim"
)

// TestBenchFleetQueries times `bpfleet fleet`'s four questions (every
// query of one refresh, asked at once, through client_golang) against a
// real Prometheus and a replicated two-node VictoriaMetrics read through
// vmauth, each holding an hour of 100, 300 and 1,000 simulated nodes
// (test/fleetsim: four pools on the recorded kernels, pods, misses with
// causes), with the default --since 1h and --window 5m: p50 and p99 of
// 40 refreshes each (make bench BENCH=fleet; BPFLEET_FLEET_SIZES=100,300
// for fewer). The history is backfilled: the fleet's clock starts
// BPFLEET_FLEET_ROUNDS (default 359) rounds of 10 s before the wall
// clock and its rounds run as fast as they go, one fleet feeding both
// stores (its gates mirror every export to VictoriaMetrics' vmagent).
// Each first answer is held to the simulator's truth: a fast wrong
// answer is no answer.
func TestBenchFleetQueries(t *testing.T) {
	sizes, err := fleetsim.BenchSizes()
	if err != nil {
		t.Fatal(err)
	}
	rounds := 359
	if s := os.Getenv("BPFLEET_FLEET_ROUNDS"); s != "" {
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 6 || rounds > 359 {
			t.Fatalf("BPFLEET_FLEET_ROUNDS=%q: want 6 to 359 rounds (10 s each, within --since 1h)", s)
		}
	}
	// The short fleet's kernels (test/fleetsim): the miss watcher runs
	// on 6.1's and 7.2's recordings, where the miss plans need it.
	rec := func(prefix string) string {
		for _, r := range fleetsim.Recordings() {
			if strings.HasPrefix(r, prefix) {
				return r
			}
		}
		t.Fatalf("no recording of a %s kernel in %v", prefix, fleetsim.Recordings())
		return ""
	}
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ctx := context.Background()
			// No rules: nothing is stamped with the wall clock before the
			// history, which Prometheus' head would then refuse as too old.
			prom := backends.StartPrometheus(t)
			vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
			q := n / 4
			interval := 10 * time.Second
			start := time.Now().Add(-time.Duration(rounds) * interval).Truncate(time.Second)
			f, err := fleetsim.New(ctx, fleetsim.Config{Seed: 45, Start: start, Interval: interval, PodChurn: 0.05,
				Endpoint: "http://" + prom.Addr + "/api/v1/otlp", Mirror: strings.TrimSuffix(vm.OTLPEndpoint(), "/v1/metrics"),
				Pools: []fleetsim.Pool{
					{Name: "web", Kernel: rec("6.18"), Nodes: n - 3*q, Roles: []fleetsim.Role{fleetsim.RoleCNI, fleetsim.RoleRunc, fleetsim.RoleSecurity}, Pods: 8},
					{Name: "batch", Kernel: rec("7.2"), Nodes: q, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
					{Name: "infra", Kernel: rec("6.1."), Nodes: q, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
					{Name: "legacy", Kernel: rec("5.10"), Nodes: q, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
				},
				Misses: []fleetsim.MissPlan{
					{Program: "canary", Cause: agent.CauseInterrupt, Pool: "batch", From: 2, PerRound: 7},
					{Program: "canary", Cause: agent.CausePreempted, Pool: "infra", From: 3, PerRound: 11},
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close(ctx)
			t0 := time.Now()
			for i := range rounds {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
				if (i+1)%60 == 0 {
					t.Logf("round %d of %d after %v", i+1, rounds, time.Since(t0).Round(time.Second))
				}
			}
			took := time.Since(t0)
			tr := f.Truth()
			t.Logf("BENCH fleet backfill n=%d: %d rounds (%v of history) in %v: %.1f ms a round, %d exports",
				n, rounds, time.Duration(rounds)*interval, took.Round(time.Second), float64(took.Milliseconds())/float64(rounds), n*rounds)
			for _, nd := range tr.Nodes {
				if nd.ExportErrors > 0 {
					t.Fatalf("node %s: %d exports failed: the stores miss part of the history", nd.Name, nd.ExportErrors)
				}
			}
			// The Prometheus head takes no sample older than its newest
			// less an hour (out of bounds) nor out of order past its window:
			// every sample of the history must have been taken.
			if err := refused("http://"+prom.Addr+"/metrics", "prometheus_tsdb_head_samples_appended_total", "prometheus_tsdb_out_of_bound_samples_total",
				"prometheus_tsdb_too_old_samples_total", "prometheus_tsdb_out_of_order_samples_total"); err != nil {
				t.Fatalf("prometheus: %v", err)
			}
			now := tr.RoundTimes[len(tr.RoundTimes)-1]
			// vmagent took every export (the gates wait for it) and
			// forwards within its 1 s flush interval.
			time.Sleep(5 * time.Second)
			c := &config.Fleet{Job: ".+", Pool: "k8s_nodepool_name", Since: time.Hour,
				Window: 5 * time.Minute, Timeout: time.Minute, Output: "json", Sort: "cpu", Limit: 20}
			for _, store := range []struct {
				name, url   string
				exactMisses bool
				metrics     []string
			}{
				{"prometheus", "http://" + prom.Addr, false, nil},
				// Within 10% on VictoriaMetrics too: on the simulated
				// clock it answers one round (of 359) more misses than the
				// truth, whose accounting of programs loaded at the
				// agent's start differs from the exporter's; the wall-clock
				// fleet of TestFleetCommandAgainstFleetsimVM is exact
				// (docs/performance.md).
				{"victoriametrics", "http://" + vm.AuthAddr, false, []string{"http://" + vm.Nodes[0].Addr + "/metrics", "http://" + vm.Nodes[1].Addr + "/metrics"}},
			} {
				c.Prometheus = store.url
				api, err := newFleetClient(c)
				if err != nil {
					t.Fatal(err)
				}
				for _, fq := range fleetQuestions() {
					var d fleetDoc
					// vmagent forwards what it took within a second or two:
					// the first answer as fed, then the timing.
					err := backends.Eventually(time.Minute, func() error {
						var err error
						if d, err = askFleet(ctx, c, fq, api, now); err != nil {
							return err
						}
						if d.empty() {
							return fmt.Errorf("fleet %s answered nothing of %d nodes", fq.use, n)
						}
						return nil
					})
					if err != nil {
						t.Fatalf("%s: %v", store.name, err)
					}
					t.Run(store.name+"/"+fq.use, func(t *testing.T) {
						switch d := d.(type) {
						case *topDoc:
							checkTop(t, tr, d, c.Since, false, false, store.exactMisses)
						case *missDoc:
							checkMisses(t, tr, d, c.Since/120, false, store.exactMisses)
						}
					})
					// 40 refreshes, or as many as 3 minutes hold (at least
					// 5): a question of seconds would hold the bench for long.
					var took []time.Duration
					for began := time.Now(); len(took) < 40 && (len(took) < 5 || time.Since(began) < 3*time.Minute); {
						t0 := time.Now()
						d, err := askFleet(ctx, c, fq, api, now)
						if err != nil {
							t.Fatalf("%s: fleet %s: %v", store.name, fq.use, err)
						}
						if d.empty() {
							t.Fatalf("%s: fleet %s answered nothing of %d nodes", store.name, fq.use, n)
						}
						took = append(took, time.Since(t0))
					}
					slices.Sort(took)
					t.Logf("BENCH fleet query %s n=%d %s: p50 %.1f ms, p99 %.1f ms (%d refreshes, %v of history)", store.name, n, fq.use,
						float64(took[len(took)/2].Microseconds())/1000, float64(took[len(took)*99/100].Microseconds())/1000, len(took),
						time.Duration(rounds)*interval)
				}
				timeAlternatives(t, store.name, store.url, api, c, now)
				for _, u := range store.metrics {
					if err := refused(u, "vm_rows_added_to_storage_total", "vm_rows_ignored_total"); err != nil {
						t.Errorf("%s: %v", store.name, err)
					}
				}
			}
			if b, err := os.ReadFile("/proc/loadavg"); err == nil {
				t.Logf("load average after n=%d: %s", n, strings.TrimSpace(string(b)))
			}
		})
	}
}

// refused reads a /metrics page and says which of the named counters
// (every series of each; one not there yet is zero) is above zero:
// samples a store did not take. took names the counter of samples taken,
// which must be there and above zero: the page is the store's.
func refused(u, took string, names ...string) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var bad []string
	taken := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range append(names, took) {
			if !strings.HasPrefix(line, name) {
				continue
			}
			rest := line[len(name):]
			if rest != "" && rest[0] != ' ' && rest[0] != '{' {
				continue
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			switch {
			case err != nil:
				return fmt.Errorf("%s: %q: %w", u, line, err)
			case name == took:
				taken += v
			case v > 0:
				bad = append(bad, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if taken == 0 {
		return fmt.Errorf("%s took no samples (%s): cannot tell what it refused", u, took)
	}
	if len(bad) > 0 {
		return fmt.Errorf("samples refused: %s", strings.Join(bad, "; "))
	}
	return nil
}

// timeAlternatives times ways of asking top's CPU (the dearest query: an
// increase over --since of every program series of every node) against
// the same store and data: as asked, over a coarser subquery, and as the
// difference of two instant lookups with reset handling. Each with its
// p50 of 10, its answer's total against the one asked, and on
// Prometheus the samples it read (stats=all).
func timeAlternatives(t *testing.T, store, url string, api querier, c *config.Fleet, now time.Time) {
	p := fleetParams(c)
	rt := fleetquery.RunTime + "{" + p.Sel + "}"
	by := fleetquery.Program + ", " + fleetquery.AttachType
	for _, alt := range []struct{ name, q string }{
		{"increase", p.TopCPU()},
		{"subquery 1m", fmt.Sprintf("sum by (%s) (increase(%s[%s:1m])) / %s", by, rt, p.Range, p.RangeSeconds)},
		{"subquery 5m", fmt.Sprintf("sum by (%s) (increase(%s[%s:5m])) / %s", by, rt, p.Range, p.RangeSeconds)},
		{"offset", fmt.Sprintf("sum by (%s) ((%s - %s offset %s) >= 0 or %s) / %s", by, rt, rt, p.Range, rt, p.RangeSeconds)},
	} {
		var took []time.Duration
		var total float64
		for i := range 11 {
			t0 := time.Now()
			ss, err := api.query(context.Background(), alt.q, now)
			if err != nil {
				t.Errorf("%s: %s: %v", store, alt.name, err)
				return
			}
			if i > 0 {
				took = append(took, time.Since(t0))
			}
			total = 0
			for _, s := range ss {
				total += s.value
			}
		}
		slices.Sort(took)
		samples := "-"
		if store == "prometheus" {
			samples = samplesRead(url, alt.q, now)
		}
		t.Logf("BENCH fleet top cpu as %q on %s: p50 %.1f ms, max %.1f ms, fleet CPU %.6f, samples read %s", alt.name, store,
			float64(took[len(took)/2].Microseconds())/1000, float64(took[len(took)-1].Microseconds())/1000, total, samples)
	}
	// Where a question's time goes: each query alone (the median of 3,
	// after one that warms), with the samples it read on Prometheus.
	qs := p.Queries()
	for _, name := range slices.Sorted(maps.Keys(qs)) {
		var took []time.Duration
		for i := range 4 {
			t0 := time.Now()
			if _, err := api.query(context.Background(), qs[name], now); err != nil {
				t.Errorf("%s: %s: %v", store, name, err)
				return
			}
			if i > 0 {
				took = append(took, time.Since(t0))
			}
		}
		slices.Sort(took)
		samples := "-"
		if store == "prometheus" {
			samples = samplesRead(url, qs[name], now)
		}
		t.Logf("BENCH fleet query %q alone on %s: %.1f ms, samples read %s", name, store, float64(took[1].Microseconds())/1000, samples)
	}
}

// samplesRead is what Prometheus says a query read (stats=all).
func samplesRead(base, q string, at time.Time) string {
	u := base + "/api/v1/query?stats=all&query=" + url.QueryEscape(q) + "&time=" + strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)
	resp, err := http.Get(u)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Stats struct {
				Samples struct {
					TotalQueryableSamples int64 `json:"totalQueryableSamples"`
					PeakSamples           int64 `json:"peakSamples"`
				} `json:"samples"`
			} `json:"stats"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d (peak %d)", body.Data.Stats.Samples.TotalQueryableSamples, body.Data.Stats.Samples.PeakSamples)
}
