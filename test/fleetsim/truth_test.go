package fleetsim

import (
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// step is one scan a node's agent exports (or a restart before it).
type step struct {
	restart bool
	insts   []instance
}

func TestLedger(t *testing.T) {
	old := func(id uint64, runs, misses uint64, c agent.MissCauses) instance {
		return instance{id: id, name: "p", runs: runs, runTimeNs: 10 * runs, misses: misses, causes: c}
	}
	fresh := func(id uint64, runs uint64) instance {
		in := old(id, runs, 0, agent.MissCauses{})
		in.loadedAfterStart = true
		return in
	}
	for _, tc := range []struct {
		name              string
		steps             []step
		runs, roundRuns   uint64
		misses            uint64
		causes            map[string]uint64
		firstInterrupt    int
		wantFirstInterupt bool
	}{
		{name: "loaded before the agent: counts from its first scan",
			steps: []step{{insts: []instance{old(1, 100, 0, agent.MissCauses{})}}, {insts: []instance{old(1, 130, 0, agent.MissCauses{})}}},
			runs:  30, roundRuns: 30},
		{name: "loaded since the agent started: all it counted",
			steps: []step{{insts: []instance{fresh(1, 7)}}, {insts: []instance{fresh(1, 9)}}},
			runs:  9, roundRuns: 2},
		{name: "unloaded and loaded again: the old adds nothing more, the new all",
			steps: []step{{insts: []instance{old(1, 100, 0, agent.MissCauses{})}}, {insts: []instance{old(1, 150, 0, agent.MissCauses{})}}, {insts: []instance{fresh(2, 5)}}},
			runs:  55, roundRuns: 5},
		{name: "agent restart: counters start over",
			steps: []step{{insts: []instance{old(1, 100, 0, agent.MissCauses{})}}, {insts: []instance{old(1, 150, 0, agent.MissCauses{})}},
				{restart: true, insts: []instance{old(1, 170, 0, agent.MissCauses{})}}, {insts: []instance{old(1, 171, 0, agent.MissCauses{})}}},
			runs: 1, roundRuns: 1},
		{name: "a counter that went down (an id reused) counts as new",
			steps: []step{{insts: []instance{old(1, 100, 0, agent.MissCauses{})}}, {insts: []instance{old(1, 40, 0, agent.MissCauses{})}}},
			runs:  40, roundRuns: 40},
		{name: "misses by cause: the history unexplained and not counted, then each cause's growth",
			steps: []step{
				{insts: []instance{old(1, 10, 5, agent.MissCauses{Unexplained: 5})}},
				{insts: []instance{old(1, 20, 9, agent.MissCauses{Unexplained: 6, Interrupt: 3})}},
				{insts: []instance{old(1, 30, 12, agent.MissCauses{Unexplained: 6, Interrupt: 6})}},
			},
			runs: 20, roundRuns: 10, misses: 7,
			causes:         map[string]uint64{agent.CauseUnexplained: 1, agent.CauseInterrupt: 6},
			firstInterrupt: 1, wantFirstInterupt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger()
			for i, s := range tc.steps {
				if s.restart {
					l.restart()
				}
				l.observe(i, s.insts)
			}
			c := l.byName["p"]
			if c.Runs != tc.runs || c.RoundRuns != tc.roundRuns || c.RunTimeNs != 10*tc.runs || c.Misses != tc.misses {
				t.Errorf("runs %d (round %d), run time %d, misses %d; want %d (%d), %d, %d", c.Runs, c.RoundRuns, c.RunTimeNs, c.Misses, tc.runs, tc.roundRuns, 10*tc.runs, tc.misses)
			}
			for _, cause := range agent.Causes {
				if got := l.causes[[2]string{"p", cause}]; got != tc.causes[cause] {
					t.Errorf("cause %s: %d, want %d", cause, got, tc.causes[cause])
				}
			}
			first, ok := l.firstMis[[2]string{"p", agent.CauseInterrupt}]
			if ok != tc.wantFirstInterupt || first != tc.firstInterrupt {
				t.Errorf("first interrupt round %d (%v), want %d (%v)", first, ok, tc.firstInterrupt, tc.wantFirstInterupt)
			}
		})
	}
}

func TestTruthSums(t *testing.T) {
	mk := func(runs, ns uint64, loaded bool) *ledger {
		l := newLedger()
		l.observe(1, []instance{{id: 1, name: "p", loadedAfterStart: true, runs: runs, runTimeNs: ns, fedRuns: runs, fedTimeNs: ns}})
		if !loaded {
			l.observe(2, nil)
		}
		return l
	}
	nodes := []NodeTruth{
		{Name: "a", Pool: "x", Kernel: "k1", Left: -1},
		{Name: "b", Pool: "x", Kernel: "k1", Left: -1},
		{Name: "c", Pool: "y", Kernel: "k2", Left: 3}, // left: not in the sums, in the fed totals
	}
	ledgers := map[string]*ledger{"a": mk(10, 1000, true), "b": mk(20, 4000, true), "c": mk(1000, 1e6, true)}
	overhead := map[string]map[string]float64{"a": {"fentry": 10}, "b": {"fentry": 30}, "c": {"fentry": 99}}
	tr := truth(2, 10*time.Second, nil, nodes, ledgers, overhead)
	p := tr.Program("p")
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"runs", float64(p.Runs), 30},
		{"run time", float64(p.RunTimeNs), 5000},
		{"fed runs", float64(p.FedRuns), 1030},
		{"nodes", float64(p.Nodes), 2},
		{"ns per run", p.NsPerRun, 5000.0 / 30},
		{"CPU share", p.CPUShare, 5000 / 10e9},
		{"worst ns per run", p.WorstNsPerRun, 200},
		{"overhead groups", float64(len(tr.Overhead)), 1},
		{"overhead mean", tr.Overhead[0].MeanNs, 20},
		{"overhead nodes", float64(tr.Overhead[0].Nodes), 2},
		{"in fleet", float64(tr.InFleet()), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if p.WorstNode != "b" {
		t.Errorf("worst node %q, want b", p.WorstNode)
	}
	// A program no longer loaded keeps its counters but runs on no node.
	ledgers["b"] = mk(20, 4000, false)
	if p := truth(2, 10*time.Second, nil, nodes, ledgers, overhead).Program("p"); p.Nodes != 1 || p.Runs != 30 {
		t.Errorf("with b's program unloaded: %d nodes, %d runs; want 1, 30", p.Nodes, p.Runs)
	}
}
