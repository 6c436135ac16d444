//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/test/backends"
)

// The fleet questions end to end: simulated nodes, each exporting through
// the agent's own exporter (exporter.New, Update, its OTLP/HTTP client)
// snapshots the test makes and keeps the truth of, into a real
// Prometheus; then `bpfleet fleet`'s four questions asked of it through
// client_golang, every figure held to the truth fed.

// simProg is one program a simulated node runs.
type simProg struct {
	name, progType, attach string
	pool                   string // "" on every node
	runs, ns               uint64 // runs per tick and ns per run (times the node's factor)
	ns0, pod               string // the owner's namespace and pod prefix
}

var simProgs = []simProg{
	{name: "cil_from_cont", progType: "sched_cls", attach: "tcx_ingress", pool: "cni", runs: 900, ns: 120, ns0: "kube-system", pod: "cilium"},
	{name: "cil_sock4", progType: "cgroup_sock_addr", attach: "cgroup_inet4_connect", pool: "cni", runs: 50, ns: 400, ns0: "kube-system", pod: "cilium"},
	{name: "runc_devices", progType: "cgroup_device", attach: "cgroup_device", runs: 20, ns: 60, ns0: "", pod: ""},
	{name: "sec_exec", progType: "lsm", attach: "lsm_mac", pool: "sec", runs: 300, ns: 700, ns0: "security", pod: "falco"},
	{name: "sec_open", progType: "tracing", attach: "fentry", pool: "sec", runs: 2000, ns: 90, ns0: "security", pod: "falco"},
}

// simMiss is misses a program has on one node from a tick on.
type simMiss struct {
	node    int
	prog    string
	cause   string
	from    int
	perTick uint64
}

var simMisses = []simMiss{
	{node: 6, prog: "sec_open", cause: "recursion", from: 5, perTick: 3},
	{node: 7, prog: "sec_open", cause: "recursion", from: 6, perTick: 2},
	{node: 8, prog: "sec_open", cause: "preempted", from: 8, perTick: 5},
	{node: 1, prog: "cil_sock4", cause: "unexplained", from: 3, perTick: 1},
}

const (
	simNodes   = 12
	simTicks   = 24
	simAbsent  = 9  // stops exporting at simStopAt
	simLeft    = 4  // shuts down (SIGTERM's final export) at simStopAt
	simStalled = 10 // keeps exporting, stops scanning at simStopAt
	simNoStats = 3  // stats off against --stats=always
	simNoWatch = 11 // no miss watcher
	simStopAt  = 8
)

var simKernels = []string{"5.15.0-91-sim", "6.1.0-18-sim", "6.8.0-45-sim"}

func simPool(i int) string {
	if i < simNodes/2 {
		return "cni"
	}
	return "sec"
}

func simNode(i int) string { return fmt.Sprintf("sim-%02d", i) }

// simFactor makes each node's runs cost a little more than the previous
// node's: the worst node of a program is its highest-numbered.
func simFactor(i int) float64 { return 1 + float64(i)/10 }

// simOverheadNs is node i's calibrated fentry/kprobe overhead: by kernel,
// plus the node's own spread.
func simOverheadNs(i int, attach string) float64 {
	base := map[string]float64{"fentry": 40, "kprobe": 110}[attach]
	return base - 5*float64(i%3) + float64(i)
}

// simTruth is what the nodes were fed, per program and node.
type simTruth struct {
	runs, runTimeNs map[string]map[int]uint64 // program → node → total
	misses          map[string]map[int]uint64 // program/cause → node → total
	missFrom        map[string]map[int]time.Time
	start, end      time.Time
	last            map[int]time.Time // each node's last export
}

func TestFleetCommandAgainstTruth(t *testing.T) {
	prom := backends.StartPrometheus(t)
	truth := feedSimFleet(t, "http://"+prom.Addr+"/api/v1/otlp")
	url := "http://" + prom.Addr
	checkFleetAgainstTruth(t, url, truth)
	if t.Failed() {
		return
	}
	checkFleetErrors(t, url)
}

// TestFleetCommandAgainstTruthVM is the same on the multi-node
// VictoriaMetrics (vmagent replicating to two storage nodes, read through
// vmauth), fed over OTLP/HTTP as vmagent takes it.
func TestFleetCommandAgainstTruthVM(t *testing.T) {
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
	truth := feedSimFleet(t, strings.TrimSuffix(vm.OTLPEndpoint(), "/v1/metrics"))
	url := "http://" + vm.AuthAddr
	checkFleetAgainstTruth(t, url, truth)
	if t.Failed() {
		return
	}
	checkFleetErrors(t, url)
}

// checkFleetErrors: --watch prints a document per refresh; a store down
// and a store without bpfleet's series each give their one line.
func checkFleetErrors(t *testing.T, url string) {
	w := simFleetConfig(url)
	w.Watch, w.Interval, w.Count = true, time.Second, 2
	var out strings.Builder
	if err := runFleet(context.Background(), w, fleetQuestions()[3], &out); err != nil {
		t.Fatalf("fleet nodes --watch: %v", err)
	}
	docs := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, d := range docs {
		var nd nodesDoc
		if err := json.Unmarshal([]byte(d), &nd); err != nil || nd.Agents != simNodes {
			t.Errorf("fleet nodes --watch -o json: %v, %d agents in %s", err, nd.Agents, d)
		}
	}
	if len(docs) != 2 {
		t.Errorf("fleet nodes --watch --count 2 -o json: %d documents, want 2:\n%s", len(docs), out.String())
	}

	c := simFleetConfig(url)
	c.Prometheus = fmt.Sprintf("http://127.0.0.1:%d", backends.FreePort(t)) // nothing listens there
	for _, q := range fleetQuestions() {
		_, err := askWith(t, c, q)
		if err == nil || !strings.HasPrefix(err.Error(), "cannot reach the query API at "+c.Prometheus+": ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("fleet %s, store down: want one line saying it cannot reach it, got %v", q.use, err)
		}
	}
	empty := backends.StartPrometheus(t)
	c.Prometheus = "http://" + empty.Addr
	for _, q := range fleetQuestions() {
		_, err := askWith(t, c, q)
		if err == nil || !strings.Contains(err.Error(), "holds no bpfleet series (no bpf_agent_scans_total") {
			t.Errorf("fleet %s, empty store: want one line saying it holds no bpfleet series, got %v", q.use, err)
		}
	}
}

func simFleetConfig(url string) *config.Fleet {
	return &config.Fleet{Prometheus: url, Job: ".+", Pool: "k8s_nodepool_name", Since: time.Minute, Window: 8 * time.Second,
		Timeout: 20 * time.Second, Output: "json", Sort: "cpu"}
}

func askWith(t *testing.T, c *config.Fleet, q fleetQuestion) (fleetDoc, error) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	api, err := newFleetClient(c)
	if err != nil {
		t.Fatal(err)
	}
	return askFleet(context.Background(), c, q, api, time.Now())
}

// feedSimFleet exports simTicks ticks a second apart from simNodes nodes
// and returns what they were fed.
func feedSimFleet(t *testing.T, endpoint string) *simTruth {
	ctx := context.Background()
	exps := make([]*exporter.Exporter, simNodes)
	for i := range exps {
		level := exporter.LevelProgram
		if i%2 == 1 {
			level = exporter.LevelWorkload
		}
		o, err := config.ResolveOTel(config.MapEnv(map[string]string{
			"OTEL_TRACES_EXPORTER":     "none",
			"OTEL_RESOURCE_ATTRIBUTES": "k8s.nodepool.name=" + simPool(i),
		}), endpoint, string(config.ProtocolHTTP))
		if err != nil {
			t.Fatal(err)
		}
		e, err := exporter.New(ctx, exporter.Config{Level: level, NodeName: simNode(i), OTel: o, Interval: time.Hour,
			Kernel: agent.KernelInfo{Release: simKernels[i%3], Arch: "amd64", CPUModel: "sim", CPUs: 4, Preempt: "PREEMPT_VOLUNTARY"}})
		if err != nil {
			t.Fatal(err)
		}
		exps[i] = e
		t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	}
	tr := &simTruth{runs: map[string]map[int]uint64{}, runTimeNs: map[string]map[int]uint64{}, misses: map[string]map[int]uint64{},
		missFrom: map[string]map[int]time.Time{}, last: map[int]time.Time{}}
	add := func(m map[string]map[int]uint64, k string, i int, v uint64) {
		if m[k] == nil {
			m[k] = map[int]uint64{}
		}
		m[k][i] += v
	}
	loaded := time.Now()
	tr.start = loaded
	progs := make([][]*agent.ProgramStat, simNodes)
	for i := range progs {
		for j, p := range simProgs {
			if p.pool != "" && p.pool != simPool(i) {
				continue
			}
			zero := uint64(0)
			ps := &agent.ProgramStat{Program: agent.Program{ID: uint32(100 + j), Name: p.name, Type: p.progType, AttachType: p.attach,
				MissKind: "recursion", LoadTime: loaded, RecursionMisses: &zero}, MissCauses: &agent.MissCauses{}}
			if p.pod != "" {
				ps.Owners = []agent.Owner{{PID: 1000 + i, Comm: p.pod + "-agent", PodName: fmt.Sprintf("%s-%02d", p.pod, i), PodNamespace: p.ns0,
					WorkloadKind: "DaemonSet", WorkloadName: p.pod}}
			}
			progs[i] = append(progs[i], ps)
			add(tr.runs, p.name+"/"+p.attach, i, 0)
		}
	}
	for tick := 1; tick <= simTicks; tick++ {
		now := time.Now()
		for i, e := range exps {
			stopped := tick > simStopAt
			if stopped && (i == simAbsent || i == simLeft) {
				continue
			}
			if !(stopped && i == simStalled) {
				snap := &agent.Snapshot{Seq: uint64(tick), Time: now, Interval: time.Second,
					Kernel:    agent.KernelInfo{Release: simKernels[i%3]},
					Stats:     agent.StatsState{Enabled: i != simNoStats, HeldByAgent: i != simNoStats, Mode: agent.StatsAlways},
					MissWatch: agent.MissWatch{Available: i != simNoWatch},
					Calibration: []agent.Calibration{
						{AttachType: "fentry", Supported: true, OverheadNs: simOverheadNs(i, "fentry")},
						{AttachType: "kprobe", Supported: true, OverheadNs: simOverheadNs(i, "kprobe")},
					}}
				for j, ps := range progs[i] {
					p := *ps
					p.MissCauses = new(agent.MissCauses)
					*p.MissCauses = *ps.MissCauses
					misses := *ps.RecursionMisses
					p.RecursionMisses = &misses
					sp := simProgByName(p.Name)
					if i != simNoStats {
						p.RunCount += sp.runs
						p.RunTimeNs += uint64(float64(sp.runs*sp.ns) * simFactor(i))
						add(tr.runs, p.Name+"/"+p.AttachType, i, sp.runs)
						add(tr.runTimeNs, p.Name+"/"+p.AttachType, i, uint64(float64(sp.runs*sp.ns)*simFactor(i)))
					}
					for _, m := range simMisses {
						if m.node == i && m.prog == p.Name && tick >= m.from {
							misses += m.perTick
							switch m.cause {
							case "recursion":
								p.MissCauses.Recursion += m.perTick
							case "preempted":
								p.MissCauses.Preempted += m.perTick
							default:
								p.MissCauses.Unexplained += m.perTick
							}
							k := p.Name + "/" + p.AttachType + "/" + m.cause
							add(tr.misses, k, i, m.perTick)
							if tr.missFrom[k] == nil {
								tr.missFrom[k] = map[int]time.Time{}
							}
							if _, ok := tr.missFrom[k][i]; !ok {
								tr.missFrom[k][i] = now
							}
						}
					}
					progs[i][j] = &p
				}
				e.Update(ctx, &agent.Snapshot{Seq: snap.Seq, Time: snap.Time, Interval: snap.Interval, Kernel: snap.Kernel, Stats: snap.Stats,
					MissWatch: snap.MissWatch, Calibration: snap.Calibration, Programs: progs[i]})
			}
			if err := e.ForceFlush(ctx); err != nil {
				t.Fatalf("%s tick %d: %v", simNode(i), tick, err)
			}
			tr.last[i] = time.Now()
		}
		if tick == simStopAt {
			if err := exps[simLeft].Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			tr.last[simLeft] = time.Now()
		}
		time.Sleep(time.Until(now.Add(time.Second)))
	}
	tr.end = time.Now()
	return tr
}

func simProgByName(name string) simProg {
	for _, p := range simProgs {
		if p.name == name {
			return p
		}
	}
	panic(name)
}

func checkFleetAgainstTruth(t *testing.T, url string, tr *simTruth) {
	c := simFleetConfig(url)
	c.Limit = 0
	byUse := map[string]fleetQuestion{}
	for _, q := range fleetQuestions() {
		byUse[q.use] = q
	}
	// Settle: the last exports are in the store within a second or two
	// (vmagent flushes every second).
	var doc fleetDoc
	err := backends.Eventually(15*time.Second, func() error {
		nd, err := askWith(t, c, byUse["nodes"])
		if err != nil {
			return err
		}
		for _, r := range nd.(*nodesDoc).Nodes {
			for i, last := range tr.last {
				if r.Node == simNode(i) && r.LastSeen.Before(last.Add(-time.Second)) && i != simAbsent && i != simLeft {
					return fmt.Errorf("%s last seen %v, last exported %v", r.Node, r.LastSeen, last)
				}
			}
		}
		if got := nd.(*nodesDoc).Agents; got != simNodes {
			return fmt.Errorf("%d agents, want %d", got, simNodes)
		}
		doc, err = askWith(t, c, byUse["top"])
		if err != nil {
			return err
		}
		if got := len(doc.(*topDoc).Programs); got != len(simProgs) {
			return fmt.Errorf("%d programs, want %d", got, len(simProgs))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("fleet top: %v", err)
	}
	rangeSec := c.Since.Seconds()
	logDoc(t, c, doc)

	t.Run("top", func(t *testing.T) {
		top := doc.(*topDoc)
		var prev float64 = math.Inf(1)
		for _, r := range top.Programs {
			k := r.Program + "/" + r.AttachType
			var runs, ns uint64
			nodes, worst, worstRatio := 0, -1, 0.0
			for i, n := range tr.runs[k] {
				nodes++
				runs += n
				ns += tr.runTimeNs[k][i]
				if n > 0 {
					if ratio := float64(tr.runTimeNs[k][i]) / float64(n); ratio > worstRatio {
						worst, worstRatio = i, ratio
					}
				}
			}
			if r.Nodes != nodes {
				t.Errorf("%s: %d nodes, fed on %d", k, r.Nodes, nodes)
			}
			// rate() over the range extrapolates by up to an export
			// interval at its end: a few % of 24 ticks.
			if want := float64(ns) / 1e9 / rangeSec; !near(r.CPU, want, 0.1) {
				t.Errorf("%s: %.6f CPUs, fed %.6f", k, r.CPU, want)
			}
			if want := float64(ns) / float64(runs); !near(r.NsPerRun, want, 0.05) {
				t.Errorf("%s: %.1f ns per run, fed %.1f", k, r.NsPerRun, want)
			}
			if r.WorstNode != simNode(worst) || !near(r.WorstNsPerRun, worstRatio, 0.01) {
				t.Errorf("%s: worst node %s at %.1f ns per run, fed %s at %.1f", k, r.WorstNode, r.WorstNsPerRun, simNode(worst), worstRatio)
			}
			if r.CPU > prev {
				t.Errorf("%s: not in CPU order", k)
			}
			prev = r.CPU
			var want float64
			causes := map[string]float64{}
			for mk, nodes := range tr.misses {
				if strings.HasPrefix(mk, k+"/") {
					for _, n := range nodes {
						want += float64(n)
						causes[strings.TrimPrefix(mk, k+"/")] += float64(n)
					}
				}
			}
			if !near(r.Misses, want, 0.1) || len(r.Causes) != len(causes) {
				t.Errorf("%s: %.1f misses by %v, fed %.0f by %v", k, r.Misses, r.Causes, want, causes)
			}
			for cause, n := range causes {
				if !near(r.Causes[cause], n, 0.1) {
					t.Errorf("%s: %.1f %s misses, fed %.0f", k, r.Causes[cause], cause, n)
				}
			}
		}
	})

	t.Run("misses", func(t *testing.T) {
		d, err := askWith(t, c, byUse["misses"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		rows := d.(*missDoc).Misses
		if len(rows) != len(tr.misses) {
			t.Errorf("%d program/cause rows, fed %d", len(rows), len(tr.misses))
		}
		for _, r := range rows {
			k := r.Program + "/" + r.AttachType + "/" + r.Cause
			fed := tr.misses[k]
			var want float64
			var nodes, kernels, pods []string
			var first time.Time
			for i, n := range fed {
				want += float64(n)
				nodes = append(nodes, simNode(i))
				if !slices.Contains(kernels, simKernels[i%3]) {
					kernels = append(kernels, simKernels[i%3])
				}
				sp := simProgByName(r.Program)
				if i%2 == 0 {
					pods = append(pods, fmt.Sprintf("%s/%s-%02d", sp.ns0, sp.pod, i))
				} else {
					pods = append(pods, sp.ns0+"/DaemonSet/"+sp.pod)
				}
				if f := tr.missFrom[k][i]; first.IsZero() || f.Before(first) {
					first = f
				}
			}
			sort.Strings(kernels)
			sort.Strings(pods)
			got := make([]string, len(r.Nodes))
			for i, n := range r.Nodes {
				got[i] = n.Node
				if n.Kernel == "" || n.Pool == "" {
					t.Errorf("%s on %s: kernel %q pool %q, want both", k, n.Node, n.Kernel, n.Pool)
				}
			}
			sort.Strings(got)
			sort.Strings(nodes)
			if !near(r.Misses, want, 0.1) || !slices.Equal(got, nodes) || !slices.Equal(r.Kernels, kernels) || !slices.Equal(r.Pods, pods) {
				t.Errorf("%s: %.1f misses on %v, kernels %v, pods %v; fed %.0f on %v, kernels %v, pods %v", k, r.Misses, got, r.Kernels, r.Pods, want, nodes, kernels, pods)
			}
			// Since: the first step (1 s) at or after the first export
			// that held a miss.
			if r.Since.Before(first.Add(-time.Millisecond)) || r.Since.After(first.Add(2*time.Second)) {
				t.Errorf("%s: missing since %v, first fed at %v", k, r.Since.Format(time.StampMilli), first.Format(time.StampMilli))
			}
		}
	})

	t.Run("overhead", func(t *testing.T) {
		d, err := askWith(t, c, byUse["overhead"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		rows := d.(*overheadDoc).Overhead
		want := map[string][]float64{}
		maxAt := map[string]int{}
		for i := 0; i < simNodes; i++ {
			for _, at := range []string{"fentry", "kprobe"} {
				k := at + "/" + simKernels[i%3] + "/" + simPool(i)
				v := simOverheadNs(i, at)
				if m, ok := maxAt[k]; !ok || v > simOverheadNs(m, at) {
					maxAt[k] = i
				}
				want[k] = append(want[k], v)
			}
		}
		if len(rows) != len(want) {
			t.Errorf("%d attach type/kernel/pool rows, fed %d", len(rows), len(want))
		}
		for _, r := range rows {
			k := r.AttachType + "/" + r.Kernel + "/" + r.Pool
			vs := want[k]
			if len(vs) == 0 {
				t.Errorf("%s: a row nothing was fed for", k)
				continue
			}
			sort.Float64s(vs)
			med := vs[len(vs)/2]
			if len(vs)%2 == 0 {
				med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
			}
			if r.Nodes != len(vs) || !near(r.MedianNs, med, 1e-6) || !near(r.MinNs, vs[0], 1e-6) || !near(r.MaxNs, vs[len(vs)-1], 1e-6) || r.MaxNode != simNode(maxAt[k]) {
				t.Errorf("%s: %d nodes, median %.2f, min %.2f, max %.2f on %s; fed %v (max on %s)", k, r.Nodes, r.MedianNs, r.MinNs, r.MaxNs, r.MaxNode, vs, simNode(maxAt[k]))
			}
		}
	})

	t.Run("nodes", func(t *testing.T) {
		// The stopped nodes are absent once --window passed since their
		// last export.
		for _, i := range []int{simAbsent, simLeft} {
			time.Sleep(time.Until(tr.last[i].Add(c.Window + time.Second)))
		}
		d, err := askWith(t, c, byUse["nodes"])
		if err != nil {
			t.Fatal(err)
		}
		logDoc(t, c, d)
		nd := d.(*nodesDoc)
		want := map[string]string{simNode(simAbsent): nodeAbsent, simNode(simLeft): nodeLeft, simNode(simStalled): nodeStalled,
			simNode(simNoStats): nodeDegraded, simNode(simNoWatch): nodeDegraded}
		got := map[string]string{}
		for _, r := range nd.Nodes {
			got[r.Node] = r.State
			if len(r.Reasons) == 0 {
				t.Errorf("%s %s without a reason", r.Node, r.State)
			}
			switch r.Node {
			case simNode(simNoStats):
				if len(r.Reasons) != 1 || !strings.HasPrefix(r.Reasons[0], "no stats") {
					t.Errorf("%s: reasons %q, want no stats", r.Node, r.Reasons)
				}
			case simNode(simNoWatch):
				if len(r.Reasons) != 1 || !strings.HasPrefix(r.Reasons[0], "no watcher") {
					t.Errorf("%s: reasons %q, want no watcher", r.Node, r.Reasons)
				}
			case simNode(simAbsent), simNode(simLeft):
				if d := r.LastSeen.Sub(tr.last[simAbsent]); r.Node == simNode(simAbsent) && (d > time.Millisecond || d < -2*time.Second) {
					t.Errorf("%s last seen %v, last export %v", r.Node, r.LastSeen, tr.last[simAbsent])
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || nd.Agents != simNodes || nd.OK != simNodes-len(want) {
			t.Errorf("nodes %v of %d agents, %d ok; fed %v of %d, %d ok", got, nd.Agents, nd.OK, want, simNodes, simNodes-len(want))
		}
	})
}

// logDoc logs d as `bpfleet fleet` draws its table.
func logDoc(t *testing.T, c *config.Fleet, d fleetDoc) {
	t.Helper()
	var b strings.Builder
	tc := *c
	tc.Output = "table"
	if err := writeFleetDoc(&b, &tc, d, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
}
