//go:build !lean

package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/fleetquery"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/fleetsim"
)

// The fleet questions against test/fleetsim's truth: nodes replaying
// snapshots recorded on real kernels (three pools, three kernels, the
// agent's default workload level), misses with known causes on known
// nodes, then a node stalled, one degraded and one leaving.

func TestFleetCommandAgainstFleetsim(t *testing.T) {
	prom := backends.StartPrometheus(t)
	fleetsimAgainstTruth(t, "http://"+prom.Addr+"/api/v1/otlp", "http://"+prom.Addr, false)
}

// On VictoriaMetrics the miss questions use increase_pure(), which counts
// a series that begins in the range (a cause's first misses on a node)
// from 0 where MetricsQL's increase() may leave its first value out, and
// which does not extrapolate: every node's misses are exactly those fed.
func TestFleetCommandAgainstFleetsimVM(t *testing.T) {
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
	fleetsimAgainstTruth(t, strings.TrimSuffix(vm.OTLPEndpoint(), "/v1/metrics"), "http://"+vm.AuthAddr, true)
}

// exactMisses holds misses to the count fed (VictoriaMetrics); else to
// 10%: Prometheus' increase() extrapolates to the range's end.
func fleetsimAgainstTruth(t *testing.T, endpoint, url string, exactMisses bool) {
	ctx := context.Background()
	rec := func(prefix string) string {
		for _, r := range fleetsim.Recordings() {
			if strings.HasPrefix(r, prefix) {
				return r
			}
		}
		t.Fatalf("no recording of a %s kernel in %v", prefix, fleetsim.Recordings())
		return ""
	}
	f, err := fleetsim.New(ctx, fleetsim.Config{Seed: 45, Endpoint: endpoint,
		Pools: []fleetsim.Pool{
			{Name: "web", Kernel: rec("6.18"), Nodes: 6, Roles: []fleetsim.Role{fleetsim.RoleCNI, fleetsim.RoleRunc, fleetsim.RoleSecurity}, Pods: 2},
			{Name: "batch", Kernel: rec("7.2"), Nodes: 4, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
			{Name: "infra", Kernel: rec("6.1."), Nodes: 4, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
		},
		Misses: []fleetsim.MissPlan{
			{Program: "canary", Cause: agent.CauseInterrupt, Pool: "batch", From: 2, PerRound: 7},
			{Program: "canary", Cause: agent.CausePreempted, Nodes: []string{"infra-0001"}, From: 4, PerRound: 11},
			// One burst, then none: the series' first value is all its
			// increase, which MetricsQL's increase() takes for a counter
			// begun before the store saw it and leaves out.
			{Program: "canary", Cause: agent.CauseNested, Nodes: []string{"infra-0003"}, From: 5, To: 6, PerRound: 40},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	rounds := func(n int) {
		for range n {
			t0 := time.Now()
			if err := f.Round(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(t0.Add(time.Second)))
		}
	}
	rounds(12)
	c := simFleetConfig(url)
	c.Limit, c.Window = 0, 8*time.Second
	tr := f.Truth()
	waitLastRound(t, c, tr)
	byUse := map[string]fleetQuestion{}
	for _, q := range fleetQuestions() {
		byUse[q.use] = q
	}
	var top *topDoc
	err = backends.Eventually(15*time.Second, func() error {
		d, err := askWith(t, c, byUse["top"])
		if err != nil {
			return err
		}
		top = d.(*topDoc)
		for _, p := range tr.Programs {
			if p.Nodes > 0 && !fleetHas(top, p.Name) {
				return fmt.Errorf("%s not yet in top", p.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	logDoc(t, c, top)

	t.Run("top", func(t *testing.T) { checkTop(t, tr, top, c.Since, true, true, exactMisses) })

	t.Run("misses", func(t *testing.T) {
		d, err := askWith(t, c, byUse["misses"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		checkMisses(t, tr, d.(*missDoc), time.Second, true, exactMisses)
	})

	t.Run("overhead", func(t *testing.T) {
		d, err := askWith(t, c, byUse["overhead"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		rows := d.(*overheadDoc).Overhead
		if len(rows) != len(tr.Overhead) {
			t.Errorf("%d rows, fed %d", len(rows), len(tr.Overhead))
		}
		for _, o := range tr.Overhead {
			ok := false
			for _, r := range rows {
				if r.AttachType == o.AttachType && r.Kernel == o.Kernel && r.Pool == o.Pool {
					ok = r.Nodes == o.Nodes && near(r.MinNs, o.MinNs, 1e-6) && near(r.MaxNs, o.MaxNs, 1e-6) && r.MedianNs >= r.MinNs && r.MedianNs <= r.MaxNs
				}
			}
			if !ok {
				t.Errorf("overhead %+v: not answered as fed", o)
			}
		}
	})

	t.Run("nodes", func(t *testing.T) {
		if err := f.Stall(true, "web-0001"); err != nil {
			t.Fatal(err)
		}
		if err := f.Degrade(true, false, "web-0002"); err != nil {
			t.Fatal(err)
		}
		if err := f.Degrade(false, true, "infra-0002"); err != nil {
			t.Fatal(err)
		}
		if err := f.Leave(ctx, "batch-0003"); err != nil {
			t.Fatal(err)
		}
		rounds(12) // past --window since the node left and the other stalled
		tr := f.Truth()
		time.Sleep(time.Second) // the last round into the store
		d, err := askWith(t, c, byUse["nodes"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		got := map[string]string{}
		for _, r := range d.(*nodesDoc).Nodes {
			got[r.Node] = r.State
		}
		for _, n := range tr.Nodes {
			want := map[string]string{fleetsim.StateUp: "", fleetsim.StateAbsent: nodeLeft, fleetsim.StateStalled: nodeStalled, fleetsim.StateDegraded: nodeDegraded}[n.State]
			// A node whose recorded kernel refused the miss watcher is
			// up to the simulator and blind to causes to the command:
			// degraded, no watcher.
			rec, err := fleetsim.Recording(n.Kernel)
			if err != nil {
				t.Fatal(err)
			}
			if want == "" && !rec.MissWatch.Available {
				want = nodeDegraded
			}
			if got[n.Name] != want {
				t.Errorf("%s: %q, fed %s %q (a node that left sent its final export: left)", n.Name, got[n.Name], n.State, n.Reasons)
			}
		}
	})
}

func fleetHas(d *topDoc, name string) bool {
	for _, r := range d.Programs {
		if r.Program == name {
			return true
		}
	}
	return false
}

// checkTop holds top's rows to the truth: each program's CPU over since
// (the agents' counters since they started: all of it in the range), ns
// per run, nodes, worst node (worst: pod churn moves it within a round's
// noise, so a churning fleet's is not held) and misses. all: every
// program fed must be answered (no --limit).
func checkTop(t *testing.T, tr *fleetsim.Truth, top *topDoc, since time.Duration, all, worst, exactMisses bool) {
	t.Helper()
	for _, p := range tr.Programs {
		var rows []topRow
		for _, r := range top.Programs {
			if r.Program == p.Name {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			if p.Nodes > 0 && all {
				t.Errorf("%s: not answered, runs on %d nodes", p.Name, p.Nodes)
			}
			continue
		}
		// The truth is by name; a name under several attach types
		// (on_kretprobe: kprobe and kretprobe links) is held to it
		// by the sums of its rows.
		r := rows[0]
		for _, o := range rows[1:] {
			r.CPU += o.CPU
			r.Misses += o.Misses
			r.Nodes = max(r.Nodes, o.Nodes)
			r.NsPerRun, r.WorstNode = 0, ""
		}
		// The workload-level counters since the agents started are
		// the increase over --since (a minute: all of it).
		if want := float64(p.RunTimeNs) / 1e9 / since.Seconds(); !near(r.CPU, want, 0.1) && want > 0 {
			t.Errorf("%s: %.6f CPUs, fed %.6f", p.Name, r.CPU, want)
		}
		if r.Nodes != p.Nodes && len(rows) == 1 {
			t.Errorf("%s: %d nodes, fed on %d", p.Name, r.Nodes, p.Nodes)
		}
		if p.Runs > 0 && len(rows) == 1 {
			if want := float64(p.RunTimeNs) / float64(p.Runs); !near(r.NsPerRun, want, 0.05) {
				t.Errorf("%s: %.1f ns per run, fed %.1f", p.Name, r.NsPerRun, want)
			}
		}
		if worst && p.WorstNode != "" && p.RoundRuns > 0 && len(rows) == 1 && (r.WorstNode != p.WorstNode || !near(r.WorstNsPerRun, p.WorstNsPerRun, 0.05)) {
			t.Errorf("%s: worst node %s at %.1f ns per run, fed %s at %.1f", p.Name, r.WorstNode, r.WorstNsPerRun, p.WorstNode, p.WorstNsPerRun)
		}
		if !missesMatch(r.Misses, p.Misses, exactMisses) {
			t.Errorf("%s: %.1f misses, fed %d", p.Name, r.Misses, p.Misses)
		}
	}
}

// checkMisses holds misses' rows to the truth: each program, cause and
// node's count, kernel, pool and since when (within step). all: every
// miss fed must be answered (no --limit); exactMisses: a store whose
// miss questions do not extrapolate (VictoriaMetrics' increase_pure()).
func checkMisses(t *testing.T, tr *fleetsim.Truth, d *missDoc, step time.Duration, all, exactMisses bool) {
	t.Helper()
	rows := d.Misses
	fed := 0
	for _, m := range tr.Misses {
		if m.Misses == 0 {
			continue
		}
		fed++
		var found *missAt
		for _, r := range rows {
			if r.Program != m.Program || r.Cause != m.Cause {
				continue
			}
			for i := range r.Nodes {
				if r.Nodes[i].Node == m.Node {
					found = &r.Nodes[i]
				}
			}
		}
		if found == nil {
			if all {
				t.Errorf("%s %s on %s: %d misses fed, none answered", m.Program, m.Cause, m.Node, m.Misses)
			}
			continue
		}
		first := tr.RoundTimes[m.FirstRound-1]
		if !missesMatch(found.Misses, m.Misses, exactMisses) || found.Kernel != m.Kernel || found.Pool != m.Pool ||
			found.Since.Before(first.Add(-step)) || found.Since.After(first.Add(3*step)) {
			t.Errorf("%s %s on %s: %+v; fed %d misses, kernel %s, pool %s, first in round %d at %v", m.Program, m.Cause, m.Node, *found,
				m.Misses, m.Kernel, m.Pool, m.FirstRound, first.Format(time.StampMilli))
		}
	}
	n := 0
	for _, r := range rows {
		n += len(r.Nodes)
	}
	if (n != fed && all) || n == 0 || fed == 0 {
		t.Errorf("%d program/cause/node misses answered, %d fed", n, fed)
	}
}

// missesMatch holds a count of misses to the count fed: exactly (within
// 0.5) where exact, else within 10% (Prometheus' increase() extrapolates
// to the range's end).
func missesMatch(got float64, fed uint64, exact bool) bool {
	if exact {
		return math.Abs(got-float64(fed)) < 0.5
	}
	return near(got, float64(fed), 0.1)
}

// waitLastRound waits until the store holds every node's last round
// (vmagent forwards a second or so after the export), so that a count
// short of the truth is the query's, not a sample still on its way.
func waitLastRound(t *testing.T, c *config.Fleet, tr *fleetsim.Truth) {
	t.Helper()
	api, err := newFleetClient(c)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds are a second apart: half a second before the last began
	// is after the one before it.
	q := fmt.Sprintf("count(timestamp(%s{job=~%q}) >= %.3f)", fleetquery.Scans, c.Job,
		float64(tr.RoundTimes[len(tr.RoundTimes)-1].Add(-500*time.Millisecond).UnixMilli())/1000)
	err = backends.Eventually(15*time.Second, func() error {
		ss, err := api.query(context.Background(), q, time.Now())
		if err != nil {
			return err
		}
		if len(ss) == 0 || int(ss[0].value) != len(tr.Nodes) {
			return fmt.Errorf("%v of %d nodes' last round in the store", ss, len(tr.Nodes))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
