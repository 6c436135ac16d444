package fleetsim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/test/backends"
)

// The recordings the tests' pools replay (testdata; README.md): the
// matrix's oldest kernel, Debian stable's, the host's and sid's.
const (
	kernel510 = "5.10.0-32-cloud-amd64"
	kernel61  = "6.1.0-57-cloud-amd64"
	kernel618 = "6.18.44-fc-v1300"
	kernel72  = "7.2.13+deb14-amd64"
)

// shortFleet is the fleet of the short test: four pools on four kernels,
// a CNI pool with pods and security agents everywhere, misses with known
// causes on known nodes.
func shortFleet(endpoint string, nodes int) Config {
	q := nodes / 4
	return Config{
		Seed: 45, Endpoint: endpoint, PodChurn: 0.2, Spans: true,
		Pools: []Pool{
			{Name: "web", Kernel: kernel618, Nodes: nodes - 3*q, Roles: []Role{RoleCNI, RoleRunc, RoleSecurity}, Pods: 3},
			{Name: "batch", Kernel: kernel72, Nodes: q, Roles: []Role{RoleSecurity}},
			{Name: "infra", Kernel: kernel61, Nodes: q, Roles: []Role{RoleSecurity}},
			{Name: "legacy", Kernel: kernel510, Nodes: q, Roles: []Role{RoleSecurity}},
		},
		Misses: []MissPlan{
			// The host's watcher is refused (the web pool's misses stay
			// unexplained, as recorded); 6.1's and 7.2's guests have one.
			{Program: "canary", Cause: agent.CauseInterrupt, Pool: "batch", From: 2, PerRound: 7},
			{Program: "canary", Cause: agent.CausePreempted, Nodes: []string{"infra-0001", "infra-0002"}, From: 3, PerRound: 11},
			{Program: "canary", Cause: agent.CauseNested, Nodes: []string{"batch-0003"}, From: 1, PerRound: 5},
		},
	}
}

// shippedRules is the chart's rules file, which the stores evaluate.
var shippedRules = []string{"../../charts/bpfleet/files/bpfleet.rules.yaml"}

// store is a Prometheus-compatible query API: Prometheus, or
// VictoriaMetrics through vmauth.
type store interface {
	Query(ctx context.Context, q string) ([]backends.Sample, error)
}

// query is an instant query's result keyed by the given labels' values
// (joined with "/").
func query(t *testing.T, st store, q string, by ...string) map[string]float64 {
	t.Helper()
	res, err := st.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, s := range res {
		var k []string
		for _, l := range by {
			k = append(k, s.Labels[l])
		}
		out[strings.Join(k, "/")] += s.Value
	}
	return out
}

// fresh keeps the samples of sel written since the round that began at
// from: the series every node in the fleet exported in that round (every
// series each export: no resend rule here), not those of nodes that left
// or of keys a restarted agent no longer has.
func fresh(sel string, from time.Time) string {
	return fmt.Sprintf("(%s and timestamp(%s) >= %.3f)", sel, sel, float64(from.UnixMilli())/1000)
}

// matchTruth waits until Prometheus holds what the truth says: per
// program name the run count, run time and misses; per node, program and
// cause the misses; the nodes that exported the last round.
func matchTruth(t *testing.T, prom store, tr *Truth) {
	t.Helper()
	from := tr.RoundTimes[len(tr.RoundTimes)-1]
	// The nodes that exported the last round: a node cut off holds its
	// older values in the backend until it reconnects.
	exported := map[string]bool{}
	for _, n := range tr.Nodes {
		if n.Left < 0 && n.LastExport == tr.Round {
			exported[n.Name] = true
		}
	}
	nodes := len(exported)
	want := map[string]float64{}
	wantTime := map[string]float64{}
	wantMiss := map[string]float64{}
	for _, p := range tr.Programs {
		for node, c := range p.PerNode {
			if exported[node] {
				want[p.Name] += float64(c.Runs)
				wantTime[p.Name] += float64(c.RunTimeNs) / 1e9
			}
		}
	}
	for _, m := range tr.Misses {
		if exported[m.Node] {
			wantMiss[m.Node+"/"+m.Program+"/"+m.Cause] = float64(m.Misses)
		}
	}
	var last string
	err := backends.Eventually(60*time.Second, func() error {
		got := query(t, prom, "sum by (bpf_program_name) "+fresh("bpf_program_run_count_total", from), "bpf_program_name")
		if d := diff(want, got, 0); d != "" {
			last = "runs by program: " + d
			return fmt.Errorf("%s", last)
		}
		gotTime := query(t, prom, "sum by (bpf_program_name) "+fresh("bpf_program_run_time_seconds_total", from), "bpf_program_name")
		if d := diff(wantTime, gotTime, 1e-9); d != "" {
			last = "run time by program: " + d
			return fmt.Errorf("%s", last)
		}
		gotMiss := query(t, prom, "sum by (k8s_node_name, bpf_program_name, bpf_miss_cause) "+fresh("bpf_program_recursion_misses_total", from)+" > 0",
			"k8s_node_name", "bpf_program_name", "bpf_miss_cause")
		if d := diff(wantMiss, gotMiss, 0); d != "" {
			last = "misses by node, program, cause: " + d
			return fmt.Errorf("%s", last)
		}
		gotNodes := query(t, prom, "count(count by (k8s_node_name) "+fresh("bpf_agent_scans_total", from)+")")
		if gotNodes[""] != float64(nodes) {
			last = fmt.Sprintf("%v nodes exported the last round, the truth says %d", gotNodes[""], nodes)
			return fmt.Errorf("%s", last)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("round %d: %s does not hold the truth: %s", tr.Round, storeName(prom), last)
	}
}

func storeName(s store) string {
	if _, ok := s.(*backends.VictoriaMetrics); ok {
		return "VictoriaMetrics"
	}
	return "Prometheus"
}

// diff says where got differs from want (relative tolerance tol), in a
// few words; "" when equal.
func diff(want, got map[string]float64, tol float64) string {
	var out []string
	for _, k := range slices.Sorted(mapsKeys(want, got)) {
		w, g := want[k], got[k]
		if math.Abs(w-g) > tol*math.Max(math.Abs(w), 1) {
			out = append(out, fmt.Sprintf("%q: %s, want %s", k, strconv.FormatFloat(g, 'g', -1, 64), strconv.FormatFloat(w, 'g', -1, 64)))
		}
	}
	if len(out) > 4 {
		out = append(out[:4], fmt.Sprintf("and %d more", len(out)-4))
	}
	return strings.Join(out, "; ")
}

func mapsKeys(ms ...map[string]float64) func(func(string) bool) {
	return func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, m := range ms {
			for k := range m {
				if !seen[k] {
					seen[k] = true
					if !yield(k) {
						return
					}
				}
			}
		}
	}
}

// TestFleetShort is the short version of issue 45's fleet in make test:
// 100 simulated nodes through a real gateway Collector into a real
// Prometheus and a replicated two-node VictoriaMetrics, with pod churn, a
// rolling upgrade, agent restarts, nodes joining and leaving and misses
// with known causes on known nodes. After each step both stores hold what
// the truth says, and the upgrade adds no series; at the end the shipped
// rules, evaluated by Prometheus and by vmalert, fire the program miss
// alerts on the nodes, programs and causes the truth says, once each.
func TestFleetShort(t *testing.T) {
	prom := backends.StartPrometheusWithRulesEvery(t, shippedRules, time.Second)
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2, Rules: shippedRules})
	jg := backends.StartJaeger(t)
	col := backends.StartGateway(t, jg, prom.OTLPEndpoint(), vm.OTLPEndpoint())
	tr := fleetShort(t, prom, []store{vm}, "http://"+col.OTLPHTTP)
	missAlerts(t, tr, prom, vm)

	// The miss episodes' spans, in Jaeger as the truth counts them: one
	// when an episode opens, one when it closes (its agent stopped, here).
	var opened, closed int
	for _, n := range tr.Nodes {
		opened += n.EpisodesOpened
		closed += n.EpisodesClosed
	}
	var last string
	err := backends.Eventually(60*time.Second, func() error {
		spans, err := jg.Spans(context.Background(), "bpfleet-agent", nil)
		if err != nil {
			return err
		}
		by := map[string]int{}
		for _, s := range spans {
			by[s.OperationName]++
		}
		if by[exporter.OpenSpanName] != opened || by[exporter.SpanName] != closed {
			last = fmt.Sprintf("%d %s and %d %s spans, the truth has %d episodes opened and %d closed",
				by[exporter.OpenSpanName], exporter.OpenSpanName, by[exporter.SpanName], exporter.SpanName, opened, closed)
			return fmt.Errorf("%s", last)
		}
		return nil
	})
	if err != nil || opened == 0 || closed == 0 {
		t.Fatalf("Jaeger: %s (%v)", last, err)
	}
	t.Logf("Jaeger holds the %d opened and %d closed episodes' spans", opened, closed)
}

// fleetShort runs the short fleet into endpoint, whose metrics end in prom
// and in the other stores.
func fleetShort(t *testing.T, prom *backends.Prometheus, others []store, endpoint string) *Truth {
	stores := append([]store{prom}, others...)
	match := func(tr *Truth) {
		t.Helper()
		for _, s := range stores {
			matchTruth(t, s, tr)
		}
	}
	ctx := context.Background()
	f, err := New(ctx, shortFleet(endpoint, 100))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	round := func() {
		t.Helper()
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for range 2 {
		round()
	}
	match(f.Truth())

	// A rolling upgrade of the security agent's tracepoint program: new
	// ids and tag on every node, 40 a round; the series stay.
	const upgraded = "on_tracepoint"
	seriesOf := `count(bpf_program_run_count_total{bpf_program_name="` + upgraded + `"})`
	before := query(t, prom, seriesOf)[""]
	if tr := f.Truth(); before != float64(tr.Program(upgraded).Nodes) {
		t.Fatalf("%v series of %s before the upgrade, the truth says %d nodes run it", before, upgraded, tr.Program(upgraded).Nodes)
	}
	// The agents' series (the rules' records and ALERTS are not theirs):
	// OTLP writes no staleness markers, so every series of the last 5
	// minutes is counted.
	const agentSeries = `count({__name__=~"bpf_.+"})`
	created, fromRound := query(t, prom, agentSeries)[""], f.Truth().Round
	f.Upgrade(upgraded, "00c0ffee00c0ffee", 40)
	for f.Upgraded(upgraded) < len(f.Nodes()) {
		round()
	}
	round()
	match(f.Truth())
	for _, s := range stores {
		if after := query(t, s, seriesOf)[""]; after != before {
			t.Errorf("%s: the upgrade of %s on every node made %v series of it from %v: a reload must not start new series", storeName(s), upgraded, after, before)
		}
	}
	// Nor did the pod restarts meanwhile: a pod restarts as its
	// workload, whose series go on. The only new series the truth has are
	// causes a node's program missed by for the first time: one
	// bpf.program.recursion_misses series of its workload key, one
	// bpf.attach_type.recursion_misses of its attach type (the canary is
	// the one program that misses, so no other shares it).
	newCauses := 0
	for _, m := range f.Truth().Misses {
		if m.FirstRound > fromRound {
			newCauses++
		}
	}
	if n := query(t, prom, agentSeries)[""] - created; n != float64(2*newCauses) {
		t.Errorf("%v new series over the upgrade and pod restarts; the truth has %d causes first counted meanwhile, 2 series each", n, newCauses)
	}

	// Ten agents restart (counters start over), three nodes join, two
	// leave.
	if err := f.RestartAgents(ctx, f.PoolNodes("web")[:10]...); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Join(ctx, "batch", 3); err != nil {
		t.Fatal(err)
	}
	if err := f.Leave(ctx, "legacy-0000", "legacy-0001"); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	match(f.Truth())

	// One agent stalls (exports, no scans), one is refused run-time
	// stats: the stores still hold the truth, and show each as it is.
	scans := `sum by (k8s_node_name) (bpf_agent_scans_total{k8s_node_name=~"web-0005|batch-0001"})`
	scans0 := query(t, prom, scans, "k8s_node_name")
	if err := f.Stall(true, "web-0005"); err != nil {
		t.Fatal(err)
	}
	if err := f.Degrade(true, false, "batch-0001"); err != nil {
		t.Fatal(err)
	}
	round()
	round()
	tr := f.Truth()
	match(tr)
	if st, dg := tr.Node("web-0005"), tr.Node("batch-0001"); st.State != StateStalled || dg.State != StateDegraded {
		t.Fatalf("the truth has web-0005 %s and batch-0001 %s, want stalled and degraded", st.State, dg.State)
	}
	for _, s := range stores {
		after := query(t, s, scans, "k8s_node_name")
		if after["web-0005"] != scans0["web-0005"] || after["batch-0001"] != scans0["batch-0001"]+2 {
			t.Errorf("%s: scans of the stalled web-0005 %v then %v (want unchanged), of batch-0001 %v then %v (want 2 more)",
				storeName(s), scans0["web-0005"], after["web-0005"], scans0["batch-0001"], after["batch-0001"])
		}
		if got := query(t, s, `sum by (k8s_node_name) (bpf_agent_stats_enabled == 0)`, "k8s_node_name"); len(got) != 1 || got["batch-0001"] != 0 {
			t.Errorf("%s: nodes with run-time stats off %v, want batch-0001 alone", storeName(s), got)
		}
	}
	if len(tr.Misses) == 0 || tr.InFleet() != 101 {
		t.Fatalf("the fleet is not what the test set up: %d miss series, %d nodes", len(tr.Misses), tr.InFleet())
	}
	t.Logf("%d nodes, %d rounds in %v: %d programs, %d miss series; %d stores hold the truth after each step",
		tr.InFleet(), tr.Round, time.Since(start).Round(time.Second), len(tr.Programs), len(tr.Misses), len(stores))
	return tr
}

// missAlertCauses are the causes the program miss alerts page on
// (BPFProgramRecursionMisses: recursion and unexplained, or
// BPFProgramMissesContentionPossible for an unexplained miss of a kind
// that may be contention; BPFProgramMissesPreempted: preempted). A miss
// the watcher explained as an interrupt or a nested program raises none.
var missAlertCauses = map[string]bool{agent.CauseRecursion: true, agent.CauseUnexplained: true, agent.CausePreempted: true}

// missAlerts waits until Prometheus' and vmalert's firing program miss
// alerts are, per node, program and cause, those of the truth's misses
// (the short fleet's misses all grew within the rules' 5-minute window),
// each exactly once: none missed, none doubled, none of a cause that does
// not page.
func missAlerts(t *testing.T, tr *Truth, prom *backends.Prometheus, vm *backends.VictoriaMetrics) {
	t.Helper()
	want := map[string]float64{}
	for _, m := range tr.Misses {
		if m.Misses > 0 && missAlertCauses[m.Cause] {
			want[m.Node+"/"+m.Program+"/"+m.Cause] = 1
		}
	}
	if len(want) == 0 {
		t.Fatal("the truth has no miss an alert pages on: the fleet is not what the test set up")
	}
	const names = "BPFProgramRecursionMisses|BPFProgramMissesContentionPossible|BPFProgramMissesPreempted"
	firing := map[string]func() (map[string]float64, error){
		"Prometheus": func() (map[string]float64, error) {
			res, err := prom.Query(context.Background(), `ALERTS{alertstate="firing", alertname=~"`+names+`"}`)
			got := map[string]float64{}
			for _, s := range res {
				got[s.Labels["instance"]+"/"+s.Labels["bpf_program_name"]+"/"+s.Labels["bpf_miss_cause"]]++
			}
			return got, err
		},
		"vmalert": func() (map[string]float64, error) {
			as, err := vm.Alerts(context.Background())
			got := map[string]float64{}
			for _, a := range as {
				if a.State == "firing" && strings.Contains("|"+names+"|", "|"+a.Name+"|") {
					got[a.Labels["instance"]+"/"+a.Labels["bpf_program_name"]+"/"+a.Labels["bpf_miss_cause"]]++
				}
			}
			return got, err
		},
	}
	for _, name := range []string{"Prometheus", "vmalert"} {
		var last string
		err := backends.Eventually(60*time.Second, func() error {
			got, err := firing[name]()
			if err != nil {
				return err
			}
			if d := diff(want, got, 0); d != "" {
				last = d
				return fmt.Errorf("%s", d)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: program miss alerts firing by node/program/cause (count) differ from the truth's misses: %s", name, last)
			continue
		}
		t.Logf("%s fires the program miss alerts of the truth's %d node/program/cause misses, once each", name, len(want))
	}
}
