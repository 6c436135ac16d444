package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
)

// TestSoakFleetFailures is the fleet with failures: real `bpfleet agent`
// processes, each its own node (K8S_NODE_NAME), export through one
// OpenTelemetry Collector into a Prometheus that evaluates the shipped
// alert rules (charts/bpfleet/files/bpfleet.rules.yaml). Round robin, one
// agent is SIGKILLed and started again with the same node name every
// crashEvery; every removeEvery one node leaves on purpose (SIGTERM, as a
// drain does, and not started again). Long: 50 agents at the chart's
// 10 s interval for an hour, a crash a minute, a removal every 10 minutes
// from minute 5 to minute 45 (the last one 15 minutes before the end).
// Short (make test): 8 agents at 1 s for 2 minutes, a crash every 20 s,
// one removal. A node crashes again only after crashPage (16 minutes: the
// alert looks back 15), so that each crash's page can be told from an
// earlier crash's: a crash slot with no such node left is skipped.
//
// Afterwards:
//   - BPFleetAgentCrashed paged for every crash on its own: not firing for
//     that node at the crash, firing within 2 minutes after it;
//   - no agent alert (BPFleetAgentCrashed, Down, Stalled) ever fired for a
//     removed node (one that had not crashed in the 16 minutes before),
//     and BPFleetAgentDown never fired (each crashed agent was back within
//     seconds);
//   - series: a crashed and restarted node has no more series over the
//     whole run than a node that never crashed (they scan the same
//     programs): a restart adds none, so the head holds the live set.
//
// The short version cannot show the removals' BPFleetAgentDown staying
// quiet (the rule waits out a 5-minute lookback and a 5-minute for:); the
// long one does (the last removal is 15 minutes before the end), and the
// promtool cases cover it in make test.
func TestSoakFleetFailures(t *testing.T) {
	agents, scanEvery, total, crashEvery, removeEvery, firstRemoval := 8, time.Second, 2*time.Minute, 20*time.Second, time.Hour, 30*time.Second
	if soakLong() {
		agents, scanEvery, total, crashEvery, removeEvery, firstRemoval = 50, 10*time.Second, time.Hour, time.Minute, 10*time.Minute, 5*time.Minute
	}
	ctx := context.Background()
	prom := backends.StartPrometheusWithRules(t, []string{filepath.Join("..", "..", "charts", "bpfleet", "files", "bpfleet.rules.yaml")})
	col := backends.StartCollector(t, prom, backends.StartJaeger(t))

	// The chart's settings but calibration: fifty agents calibrating at
	// once (and again after every crash) would measure each other, and
	// calibration is not what this test is about.
	start := func(node string) *agentProc {
		return startAgent(t, []string{"K8S_NODE_NAME=" + node, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.OTLPHTTP, "OTEL_TRACES_EXPORTER=none",
			fmt.Sprintf("OTEL_METRIC_EXPORT_INTERVAL=%d", scanEvery.Milliseconds())},
			soakArgs("--interval", scanEvery.String(), "--metrics-level", "workload", "--max-programs", "1000", "--calibrate=false")...)
	}
	nodes := make([]string, agents)
	procs := map[string]*agentProc{}
	for i := range nodes {
		nodes[i] = fmt.Sprintf("fleet-%02d", i)
		procs[nodes[i]] = start(nodes[i])
	}
	// Every agent has reported before the first failure.
	if err := backends.Eventually(time.Minute, func() error {
		s, err := prom.Query(ctx, `count(bpf_agent_scans_total{instance=~"fleet-.*"})`)
		if err == nil && (len(s) != 1 || s[0].Value != float64(agents)) {
			err = fmt.Errorf("agents reporting: %v of %d", s, agents)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	type crash struct {
		node string
		at   time.Time
	}
	var crashes []crash
	removed := map[string]bool{}
	removedAt := map[string]time.Time{}
	lastCrash := map[string]time.Time{}
	// The first references nodes never crash nor leave: their series are
	// what a crashed node's are compared with.
	const references = 2
	// crashPage is how long after a crash its page may still fire
	// (BPFleetAgentCrashed looks back 15 minutes): a node crashed within
	// it is neither crashed again nor removed.
	const crashPage = 16 * time.Minute
	began := time.Now()
	nextCrash, nextRemoval, victim := began.Add(crashEvery), began.Add(firstRemoval), references
	for time.Since(began) < total {
		next := nextCrash
		if nextRemoval.Before(next) {
			next = nextRemoval
		}
		time.Sleep(time.Until(next))
		now := time.Now()
		if !now.Before(nextRemoval) {
			// (14, not 15: the removal due at minute 45 comes a few
			// milliseconds after it.)
			if soakLong() && total-now.Sub(began) < 14*time.Minute {
				// Too late to see BPFleetAgentDown stay quiet for it (a
				// 5-minute lookback, then a 5-minute for:).
				nextRemoval = began.Add(total + time.Hour)
				continue
			}
			// The last node of the list that is still here leaves, and
			// did not crash in the last 16 minutes: its crash's page
			// (BPFleetAgentCrashed looks back 15) is no removal's.
			for i := len(nodes) - 1; i >= references; i-- {
				if n := nodes[i]; !removed[n] && now.Sub(lastCrash[n]) > crashPage {
					procs[n].stop(t)
					removed[n], removedAt[n] = true, time.Now()
					t.Logf("%s: %s removed (SIGTERM, not restarted)", now.Sub(began).Round(time.Second), n)
					break
				}
			}
			nextRemoval = nextRemoval.Add(removeEvery)
			continue
		}
		n := ""
		for range nodes {
			if c := nodes[victim]; victim >= references && !removed[c] && now.Sub(lastCrash[c]) > crashPage {
				n = c
			}
			victim = (victim + 1) % len(nodes)
			if n != "" {
				break
			}
		}
		if n == "" {
			t.Logf("%s: no node left that did not crash in the last %s: this crash skipped", now.Sub(began).Round(time.Second), crashPage)
			nextCrash = nextCrash.Add(crashEvery)
			continue
		}
		p := procs[n]
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		err := <-p.done
		p.done <- err // for its cleanup
		crashes = append(crashes, crash{n, time.Now()})
		lastCrash[n] = time.Now()
		procs[n] = start(n)
		nextCrash = nextCrash.Add(crashEvery)
	}
	// The last crash's restarted agent reports and the rule sees it.
	time.Sleep(min(2*time.Minute, 10*scanEvery+10*time.Second))
	window := time.Since(began) + time.Minute
	t.Logf("%d agents, %d crashes (SIGKILL and restart), %d removals over %s", agents, len(crashes), len(removed), time.Since(began).Round(time.Second))

	// Every crash paged by its own alert: BPFleetAgentCrashed for its node
	// not firing at the crash (an earlier crash's page still firing would
	// otherwise count for this one) and firing within 2 minutes after it.
	paged := 0
	for _, c := range crashes {
		at := c.at.Add(2 * time.Minute)
		if now := time.Now(); now.Before(at) {
			at = now
		}
		sel := fmt.Sprintf(`ALERTS{alertname="BPFleetAgentCrashed",alertstate="firing",instance=%q}`, c.node)
		before, err := prom.Query(ctx, fmt.Sprintf(`%s @ %d`, sel, c.at.Unix()))
		if err != nil {
			t.Fatal(err)
		}
		after, err := prom.Query(ctx, fmt.Sprintf(`max_over_time(%s[%ds] @ %d)`, sel, int(at.Sub(c.at).Seconds())+1, at.Unix()))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(before) > 0:
			t.Errorf("the crash of %s at %s has no page of its own: BPFleetAgentCrashed was already firing for the node when it crashed", c.node, c.at.Sub(began).Round(time.Second))
		case len(after) == 0:
			t.Errorf("the crash of %s at %s did not page (BPFleetAgentCrashed never fired within %s)", c.node, c.at.Sub(began).Round(time.Second), at.Sub(c.at).Round(time.Second))
		default:
			paged++
		}
	}
	t.Logf("BPFleetAgentCrashed fired for %d of %d crashes", paged, len(crashes))

	// No page for the planned removals, no BPFleetAgentDown at all. Pages
	// are firing alerts: BPFleetAgentStalled goes pending for a minute or
	// so after an agent stops (its last samples stop increasing while
	// they are still in the 5-minute window) and never reaches its for:.
	// A removed node may have crashed, and paged, long before its removal
	// (16 minutes or more: the crash page's lookback is 15): only what
	// fired after the removal is the removal's.
	fired, err := prom.Query(ctx, fmt.Sprintf(`count by (alertname, instance) (count_over_time(ALERTS{alertname="BPFleetAgentDown",alertstate="firing"}[%ds]))`, int(window.Seconds())))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fired {
		t.Errorf("BPFleetAgentDown fired for %s: every crashed agent came back within seconds", s.Labels["instance"])
	}
	end := time.Now()
	for n, at := range removedAt {
		fired, err := prom.Query(ctx, fmt.Sprintf(`count by (alertname) (count_over_time(ALERTS{alertname=~"BPFleetAgent.*",alertstate="firing",instance=%q}[%ds] @ %d))`,
			n, int(end.Sub(at).Seconds())+1, end.Unix()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range fired {
			t.Errorf("%s fired for %s after its planned removal at %s", s.Labels["alertname"], n, at.Sub(began).Round(time.Second))
		}
	}

	// Series over the whole run, per node, keyed without the node's own
	// labels. A restart must not add keys: a label that changes with each
	// process (a pid, a start time, a program id at the workload level)
	// would give a crashed node a second copy of its ~100 series per
	// crash. Compared against the union of the nodes that never crashed,
	// which scan the same programs; what differs between nodes anyway is
	// programs that lived for a scan or two (other agents' start-up
	// probes and iterators, an owner not yet resolved at a program's
	// first scan), bounded here by a quarter of a node's series.
	all, err := prom.Series(ctx, `{instance=~"fleet-.*", __name__!~"ALERTS.*"}`, began.Add(-time.Minute), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]map[string]bool{}
	for _, s := range all {
		n := s["instance"]
		for _, l := range []string{"instance", "service_instance_id", "k8s_node_name"} {
			delete(s, l)
		}
		if keys[n] == nil {
			keys[n] = map[string]bool{}
		}
		keys[n][fmt.Sprint(s)] = true
	}
	steady := map[string]bool{}
	for _, n := range nodes[:references] {
		for k := range keys[n] {
			steady[k] = true
		}
	}
	if len(steady) == 0 {
		t.Fatalf("no series for the nodes that never crashed: %v", nodes[:references])
	}
	crashed := map[string]bool{}
	for _, c := range crashes {
		crashed[c.node] = true
	}
	var extra []int
	for n := range crashed {
		x := 0
		for k := range keys[n] {
			if !steady[k] {
				x++
				if x <= 3 || len(keys[n]) > len(steady)*5/4 {
					t.Logf("%s only: %s", n, k)
				}
			}
		}
		extra = append(extra, x)
		if len(keys[n]) > len(steady)*5/4 {
			t.Errorf("%s, crashed and restarted, has %d series over the run against %d for the nodes that never crashed (%d its own)", n, len(keys[n]), len(steady), x)
		}
	}
	slices.Sort(extra)
	t.Logf("series over the run: %d keys on the nodes that never crashed; a crashed node's keys they lack: %v", len(steady), extra)
	head, err := prom.Query(ctx, `prometheus_tsdb_head_series`)
	if err == nil && len(head) == 1 {
		t.Logf("Prometheus head series at the end: %.0f for %d nodes", head[0].Value, agents)
	}

	for n, p := range procs {
		if !removed[n] {
			p.stop(t)
		}
	}
}
