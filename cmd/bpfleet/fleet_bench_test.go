//go:build bench && !lean

package main

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/fleetsim"
)

// TestBenchFleetQueries times `bpfleet fleet`'s four questions (every
// query of one refresh, asked at once, through client_golang) against a
// real Prometheus holding 100, 300 and 1,000 simulated nodes
// (test/fleetsim: four pools on the recorded kernels, pods, misses with
// causes), with the default --since 1h and --window 5m: p50 and p99 of
// 40 refreshes each (make bench BENCH=fleet; BPFLEET_FLEET_SIZES=100,300
// for fewer).
func TestBenchFleetQueries(t *testing.T) {
	sizes, err := fleetsim.BenchSizes()
	if err != nil {
		t.Fatal(err)
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
			prom := backends.StartPrometheus(t)
			q := n / 4
			f, err := fleetsim.New(ctx, fleetsim.Config{Seed: 45, Endpoint: "http://" + prom.Addr + "/api/v1/otlp", PodChurn: 0.05,
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
			start := time.Now()
			for range 6 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("fed %d nodes 6 rounds in %v", n, time.Since(start).Round(time.Second))
			c := &config.Fleet{Prometheus: "http://" + prom.Addr, Job: ".+", Pool: "k8s_nodepool_name", Since: time.Hour,
				Window: 5 * time.Minute, Timeout: time.Minute, Output: "json", Sort: "cpu", Limit: 20}
			api, err := newFleetClient(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, fq := range fleetQuestions() {
				var took []time.Duration
				for i := range 41 {
					t0 := time.Now()
					d, err := askFleet(ctx, c, fq, api, time.Now())
					if err != nil {
						t.Fatalf("fleet %s: %v", fq.use, err)
					}
					if d.empty() {
						t.Fatalf("fleet %s answered nothing of %d nodes", fq.use, n)
					}
					if i > 0 { // the first warms the store's caches
						took = append(took, time.Since(t0))
					}
				}
				slices.Sort(took)
				t.Logf("BENCH fleet query n=%d %s: p50 %.1f ms, p99 %.1f ms (%d refreshes)", n, fq.use,
					float64(took[len(took)/2].Microseconds())/1000, float64(took[len(took)*99/100].Microseconds())/1000, len(took))
			}
		})
	}
}
