package fleetsim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
)

// PoolAttr is the resource attribute naming a node's pool. Fleets set one
// through OTEL_RESOURCE_ATTRIBUTES (the chart's extraEnv); Prometheus keeps
// it in target_info unless promoted, VictoriaMetrics as a label.
const PoolAttr = "k8s.nodepool.name"

// Pool is a set of nodes alike: one kernel, one program set.
type Pool struct {
	Name string
	// Kernel is the recording the nodes replay (Recordings()).
	Kernel string
	Nodes  int
	// Roles are the program sets the nodes run (RoleBase always).
	Roles []Role
	// Pods per node (for RoleCNI and RoleRunc).
	Pods int
}

// MissPlan makes a program miss with a known cause on known nodes: From
// (a round, inclusive) to To (exclusive; 0: for ever), PerRound misses
// each round, on Nodes (names; empty: every node of Pool). Only where the
// recorded program has recursion_misses (Linux 5.12+): elsewhere the
// kernel has no counter, and the plan does nothing.
type MissPlan struct {
	Program, Cause string
	Pool           string
	Nodes          []string
	From, To       int
	PerRound       uint64
}

// Config is one fleet.
type Config struct {
	// Seed makes every rate, pod, churn and upgrade order reproducible.
	Seed  uint64
	Pools []Pool
	// Endpoint is the OTLP/HTTP base URL the agents export to (a
	// Collector's http://host:4318, Prometheus' http://host/api/v1/otlp);
	// each pool's agents go through a gate of their own (Cut).
	Endpoint string
	// Mirror is a second OTLP/HTTP base URL every gate also sends each
	// request to (empty: none): one fleet feeds two stores with the
	// agents' work done once, where a gateway Collector fanning out would
	// spend more CPU than the fleet. A request the mirror refuses fails.
	Mirror string
	// Interval is the simulated time one round stands for (default 10 s:
	// the agent's default --interval).
	Interval time.Duration
	// Start is the simulated time of the fleet's boot; round r is at
	// Start + r × Interval, and the agents stamp every point with it
	// (exporter.Config.Clock): a bench backfills an hour of history in
	// minutes. Zero: the wall clock, rounds whenever they run.
	Start time.Time
	// ResendUnchanged is the agents' --resend-unchanged (default 0: every
	// series in every export). It runs on the fleet's clock (Start).
	ResendUnchanged time.Duration
	// Cluster is k8s.cluster.name (empty: none).
	Cluster string
	// PodChurn is the chance per node and round that one pod restarts
	// (a new pod of the same workload: new uid, container, interface,
	// program ids).
	PodChurn float64
	Misses   []MissPlan
	// Parallel bounds the nodes exporting at once (default 4 × CPUs).
	Parallel int
	// Spans makes the agents emit their miss episodes as spans (OTLP
	// traces to Endpoint): opened and closed as the agent's episodes are
	// (NodeTruth.EpisodesOpened, EpisodesClosed).
	Spans bool
	// Timeout bounds one export (default 30 s, the SDK's export timeout):
	// an export that timed out on the agent's side may still have reached
	// the backend, and the truth would not know.
	Timeout time.Duration
}

// Fleet is a running simulated fleet.
type Fleet struct {
	cfg       Config
	nodes     []*node
	byName    map[string]*node
	pools     map[string]*Pool
	recs      map[string]*agent.Snapshot
	gates     map[string]*gate
	workloads [][3]string
	rng       *rand.Rand
	uid       uint64
	round     int
	// clock is the simulated now (Config.Start).
	clock    time.Time
	times    []time.Time
	upgrades []*upgrade
	log      *slog.Logger
	// simCPU is the CPU time the simulator itself spent on counters and
	// snapshots (not the exporters'): benches keep it out of their figures.
	simCPU time.Duration
}

type upgrade struct {
	program, tag string
	perRound     int
	order        []*node
	done         int
}

// New builds the fleet: every node booted with its programs, its agent
// started (nothing exported until the first Round).
func New(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 4 * runtime.GOMAXPROCS(0)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	f := &Fleet{
		cfg: cfg, byName: map[string]*node{}, pools: map[string]*Pool{}, recs: map[string]*agent.Snapshot{}, gates: map[string]*gate{},
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		workloads: [][3]string{
			{"shop", "Deployment", "web"}, {"shop", "Deployment", "api"}, {"payments", "StatefulSet", "ledger"},
			{"search", "Deployment", "indexer"}, {"monitoring", "DaemonSet", "node-exporter"},
		},
	}
	if !cfg.Start.IsZero() {
		f.clock = cfg.Start
	}
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if _, dup := f.pools[p.Name]; dup || p.Name == "" {
			return nil, fmt.Errorf("fleetsim: pool %q: empty or named twice", p.Name)
		}
		f.pools[p.Name] = p
		if f.recs[p.Kernel] == nil {
			rec, err := Recording(p.Kernel)
			if err != nil {
				return nil, err
			}
			f.recs[p.Kernel] = rec
		}
		if cfg.Endpoint != "" {
			g, err := startGate(cfg.Endpoint, cfg.Mirror)
			if err != nil {
				f.Close(ctx)
				return nil, err
			}
			f.gates[p.Name] = g
		}
		for range p.Nodes {
			if _, err := f.addNode(ctx, p, 0); err != nil {
				f.Close(ctx)
				return nil, err
			}
		}
	}
	for _, mp := range cfg.Misses {
		if _, ok := f.pools[mp.Pool]; !ok && len(mp.Nodes) == 0 {
			f.Close(ctx)
			return nil, fmt.Errorf("fleetsim: miss plan for %s: no pool %q and no nodes", mp.Program, mp.Pool)
		}
		for _, name := range mp.Nodes {
			if f.byName[name] == nil {
				f.Close(ctx)
				return nil, fmt.Errorf("fleetsim: miss plan for %s: no node %q", mp.Program, name)
			}
		}
	}
	return f, nil
}

// now is the fleet's time: the simulated clock (Config.Start), else the
// wall clock.
func (f *Fleet) now() time.Time {
	if f.cfg.Start.IsZero() {
		return time.Now()
	}
	return f.clock
}

// seedOf is a node's own seed: the fleet's and its name.
func (f *Fleet) seedOf(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ f.cfg.Seed
}

// addNode boots a node of pool p: its programs loaded before its agent
// starts (as a node's boot loads them before the DaemonSet's pod runs).
func (f *Fleet) addNode(ctx context.Context, p *Pool, round int) (*node, error) {
	idx := 0
	for _, n := range f.nodes {
		if n.pool == p.Name {
			idx++
		}
	}
	name := fmt.Sprintf("%s-%04d", p.Name, idx)
	rec := f.recs[p.Kernel]
	n := &node{
		name: name, pool: p.Name, kernel: rec.Kernel.Release, idx: len(f.nodes), rec: rec, tmpl: templates(rec),
		roles: append([]Role{RoleBase}, p.Roles...), joined: round, spans: f.cfg.Spans, left: -1, lastExport: -1,
		rng: rand.New(rand.NewPCG(f.seedOf(name), 1)), ledger: newLedger(), upgraded: map[string]string{},
		overhead: map[string]float64{},
	}
	n.factor = 0.5 + n.rng.Float64()
	for _, c := range rec.Calibration {
		if c.Supported {
			c.OverheadNs *= 0.9 + 0.2*n.rng.Float64()
			n.overhead[c.AttachType] = c.OverheadNs
		}
		n.calib = append(n.calib, c)
	}
	for _, u := range f.upgrades {
		if slices.Contains(u.order[:u.done], n) {
			n.upgraded[u.program] = u.tag
		}
	}
	boot := f.now()
	n.clock.Store(boot.UnixNano())
	for _, r := range []Role{RoleBase, RoleSecurity} {
		if n.has(r) {
			for _, t := range n.tmpl[r] {
				n.load(f, t, r, nil, boot, false)
			}
		}
	}
	for range p.Pods {
		n.startPod(f, nil, boot, false)
	}
	for _, mp := range f.cfg.Misses {
		if (len(mp.Nodes) == 0 && mp.Pool == p.Name) || slices.Contains(mp.Nodes, name) {
			if mp.Cause != agent.CauseUnexplained && !rec.MissWatch.Available {
				return nil, fmt.Errorf("fleetsim: miss plan for %s on %s: cause %s, but kernel %s's miss watcher is off (%s): its misses are unexplained",
					mp.Program, name, mp.Cause, rec.Kernel.Release, rec.MissWatch.Reason)
			}
			n.extraMiss = append(n.extraMiss, &mp)
		}
	}
	if err := f.startAgent(ctx, n); err != nil {
		return nil, err
	}
	f.nodes = append(f.nodes, n)
	f.byName[name] = n
	return n, nil
}

// startAgent starts the node's agent: its exporter, as the agent builds
// it (exporter.New with the node's resource and the OTLP settings).
func (f *Fleet) startAgent(ctx context.Context, n *node) error {
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":        "none",
		"OTEL_BSP_SCHEDULE_DELAY":     "200",
		"OTEL_RESOURCE_ATTRIBUTES":    PoolAttr + "=" + n.pool,
		"OTEL_EXPORTER_OTLP_TIMEOUT":  fmt.Sprint(f.cfg.Timeout.Milliseconds()),
		"OTEL_METRIC_EXPORT_TIMEOUT":  fmt.Sprint(f.cfg.Timeout.Milliseconds()),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
	}
	if f.cfg.Spans {
		env["OTEL_TRACES_EXPORTER"] = "otlp"
	}
	var o config.OTel
	if g := f.gates[n.pool]; g != nil {
		var err error
		if o, err = config.ResolveOTel(config.MapEnv(env), g.url, string(config.ProtocolHTTP)); err != nil {
			return fmt.Errorf("fleetsim: node %s: %w", n.name, err)
		}
	}
	var clock func() time.Time
	if !f.cfg.Start.IsZero() {
		clock = func() time.Time { return time.Unix(0, n.clock.Load()) }
	}
	e, err := exporter.New(ctx, exporter.Config{
		Level: exporter.LevelWorkload, NodeName: n.name, ClusterName: f.cfg.Cluster, Kernel: n.rec.Kernel,
		OTel: o, Log: f.log,
		// Exported by ForceFlush once per round (and by the first
		// Update): the rounds are the clock.
		Interval: time.Hour, ScanInterval: f.cfg.Interval, ResendUnchanged: f.cfg.ResendUnchanged, Clock: clock,
	})
	if err != nil {
		return fmt.Errorf("fleetsim: node %s: %w", n.name, err)
	}
	n.exp = e
	n.agentGen++
	return nil
}

// Round runs one round: the fleet's motion (upgrades, pod churn), then
// every node in the fleet advances its counters by one Interval, scans,
// and exports (Update, ForceFlush). A failed export is counted, not
// returned: agents keep going.
func (f *Fleet) Round(ctx context.Context) error {
	f.round++
	round := f.round
	if !f.cfg.Start.IsZero() {
		f.clock = f.cfg.Start.Add(time.Duration(round) * f.cfg.Interval)
	}
	t0 := f.now()
	// The motion (upgrades, pod restarts) happens between scans: on the
	// simulated clock half an interval before this round's, so that no
	// program is loaded at the instant it is scanned (a counter's start
	// equal to its point's time, which the exporter moves to its own).
	moved := t0
	if !f.cfg.Start.IsZero() {
		moved = t0.Add(-f.cfg.Interval / 2)
	}
	for _, u := range f.upgrades {
		f.stepUpgrade(u, moved)
	}
	for _, n := range f.nodes {
		if n.left >= 0 || f.cfg.PodChurn == 0 || len(n.pods) == 0 {
			continue
		}
		if n.rng.Float64() < f.cfg.PodChurn {
			// The pod's controller makes a new one: new uid, container,
			// interface and program ids, the same workload.
			w := n.stopPod(n.rng.IntN(len(n.pods)))
			n.startPod(f, w, moved, true)
		}
	}
	// The simulator's own work, apart from the exporters' so a bench can
	// leave it out: every node's counters and scan, one after the other.
	c0 := processCPU()
	type job struct {
		n     *node
		snap  *agent.Snapshot
		insts []instance
	}
	var jobs []job
	for _, n := range f.nodes {
		if n.left >= 0 {
			continue
		}
		n.clock.Store(f.now().UnixNano())
		grow := n.advance(round)
		if n.stalled {
			// Its scans stopped: the kernel counts on, the agent exports
			// what it had.
			insts := make([]instance, 0, len(n.progs))
			for _, sp := range n.progs {
				g := grow[sp.uid]
				insts = append(insts, instance{id: sp.uid, name: sp.tmpl.Name, fedRuns: g[0], fedTimeNs: g[1], fedMisses: g[2]})
			}
			n.ledger.fed(insts)
			jobs = append(jobs, job{n: n})
			continue
		}
		snap, insts := n.snapshot(f, f.now(), grow)
		jobs = append(jobs, job{n, snap, insts})
	}
	f.simCPU += processCPU() - c0
	f.times = append(f.times, f.now())
	sem := make(chan struct{}, f.cfg.Parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n := j.n
			if j.snap != nil {
				n.exp.Update(ctx, j.snap)
				n.ledger.observe(round, j.insts)
			}
			fctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			defer cancel()
			if err := n.exp.ForceFlush(fctx); err != nil {
				n.exportErrors++
				return
			}
			n.lastExport = round
		}()
	}
	wg.Wait()
	return nil
}

// SimCPU is the CPU time the simulator spent on its own work (counters,
// snapshots), apart from the exporters': what a bench subtracts.
func (f *Fleet) SimCPU() time.Duration { return f.simCPU }

// processCPU is the process's CPU time (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Nodes names the nodes in the fleet now, in order.
func (f *Fleet) Nodes() []string {
	var out []string
	for _, n := range f.nodes {
		if n.left < 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// PoolNodes names a pool's nodes in the fleet now.
func (f *Fleet) PoolNodes(pool string) []string {
	var out []string
	for _, n := range f.nodes {
		if n.left < 0 && n.pool == pool {
			out = append(out, n.name)
		}
	}
	return out
}

// RestartAgents restarts the named nodes' agents now (as a rollout of the
// DaemonSet does): each exports its last scan on the way out, and the new
// one's counters start over.
func (f *Fleet) RestartAgents(ctx context.Context, names ...string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, f.cfg.Parallel)
	for _, name := range names {
		n := f.byName[name]
		if n == nil || n.left >= 0 {
			return fmt.Errorf("fleetsim: restart: no node %q in the fleet", name)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			n.endEpisodes(sctx)
			_ = n.exp.Shutdown(sctx)
			cancel()
			err := f.startAgent(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			n.restarts++
			n.ledger.restart()
			for _, sp := range n.progs {
				sp.loadedAfterStart = false
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Join adds count nodes to pool (new names) before the next round.
func (f *Fleet) Join(ctx context.Context, pool string, count int) ([]string, error) {
	p := f.pools[pool]
	if p == nil {
		return nil, fmt.Errorf("fleetsim: join: no pool %q", pool)
	}
	var out []string
	for range count {
		n, err := f.addNode(ctx, p, f.round)
		if err != nil {
			return out, err
		}
		out = append(out, n.name)
	}
	return out, nil
}

// Leave takes nodes out of the fleet (drained): their agents stop on
// SIGTERM, with a final export.
func (f *Fleet) Leave(ctx context.Context, names ...string) error {
	for _, name := range names {
		n := f.byName[name]
		if n == nil || n.left >= 0 {
			return fmt.Errorf("fleetsim: leave: no node %q in the fleet", name)
		}
		sctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
		n.endEpisodes(sctx)
		_ = n.exp.Shutdown(sctx)
		cancel()
		n.left = f.round
	}
	return nil
}

// Cut cuts a pool off from the backend (on: every connection refused, as
// a network partition that resets them) or lets it through again.
func (f *Fleet) Cut(pool string, on bool) error {
	g := f.gates[pool]
	if g == nil {
		return fmt.Errorf("fleetsim: cut: no pool %q exporting", pool)
	}
	g.cut.Store(on)
	if on {
		g.cutAt.Store(int64(f.round))
	}
	return nil
}

// Stall stops the named agents' scans (they go on exporting what they
// had); Unstall starts them again.
func (f *Fleet) Stall(on bool, names ...string) error {
	for _, name := range names {
		n := f.byName[name]
		if n == nil {
			return fmt.Errorf("fleetsim: stall: no node %q", name)
		}
		n.stalled = on
	}
	return nil
}

// Degrade makes the named nodes' agents blind from the next round: with
// noStats the kernel refused run-time stats (the agent asked, --stats
// always; the kernel counts no runs or run time from then, misses still),
// with noWatcher the miss watcher (every miss unexplained).
func (f *Fleet) Degrade(noStats, noWatcher bool, names ...string) error {
	for _, name := range names {
		n := f.byName[name]
		if n == nil {
			return fmt.Errorf("fleetsim: degrade: no node %q", name)
		}
		n.noStats, n.noWatcher, n.degraded = noStats, noWatcher, nil
		if noStats {
			n.degraded = append(n.degraded, agent.FeatureStats+": BPF_ENABLE_STATS refused: operation not permitted: run counts and run time are not counted")
		}
		if noWatcher {
			n.degraded = append(n.degraded, "miss watch: not supported: perf_event_open of a hardware watchpoint on kernel memory: operation not permitted: every miss is unexplained")
		}
	}
	return nil
}

// Upgrade starts a rolling upgrade of program across the fleet:
// perRound nodes a round, in an order drawn from the seed, each unloading
// its copies and loading the new version (new ids, tag newTag).
func (f *Fleet) Upgrade(program, newTag string, perRound int) {
	u := &upgrade{program: program, tag: newTag, perRound: perRound}
	for _, n := range f.nodes {
		if n.left < 0 {
			u.order = append(u.order, n)
		}
	}
	f.rng.Shuffle(len(u.order), func(i, j int) { u.order[i], u.order[j] = u.order[j], u.order[i] })
	f.upgrades = append(f.upgrades, u)
}

// Upgraded says how many nodes run the new version.
func (f *Fleet) Upgraded(program string) int {
	for _, u := range f.upgrades {
		if u.program == program {
			return u.done
		}
	}
	return 0
}

func (f *Fleet) stepUpgrade(u *upgrade, now time.Time) {
	for i := 0; i < u.perRound && u.done < len(u.order); i++ {
		n := u.order[u.done]
		u.done++
		if n.left >= 0 {
			continue
		}
		n.upgraded[u.program] = u.tag
		var reload []*simProg
		kept := n.progs[:0]
		for _, sp := range n.progs {
			if sp.tmpl.Name == u.program {
				reload = append(reload, sp)
			} else {
				kept = append(kept, sp)
			}
		}
		n.progs = kept
		for _, old := range reload {
			n.vanished(old)
			if old.pod != nil {
				old.pod.progs = slices.DeleteFunc(old.pod.progs, func(x *simProg) bool { return x == old })
			}
			n.load(f, old.tmpl, roleOf(old.tmpl), old.pod, now, true)
		}
	}
}

// Truth is what the fleet fed so far (a copy).
func (f *Fleet) Truth() *Truth {
	var nodes []NodeTruth
	ledgers := map[string]*ledger{}
	overhead := map[string]map[string]float64{}
	for _, n := range f.nodes {
		nt := NodeTruth{Name: n.name, Pool: n.pool, Kernel: n.kernel, State: StateUp, Programs: len(n.progs),
			Restarts: n.restarts, ExportErrors: n.exportErrors, LastExport: n.lastExport, Joined: n.joined, Left: n.left,
			EpisodesOpened: n.episodesOpened, EpisodesClosed: n.episodesClosed}
		g := f.gates[n.pool]
		switch {
		case n.left >= 0:
			nt.State, nt.Reasons = StateAbsent, []string{fmt.Sprintf("left the fleet at round %d", n.left)}
		case g != nil && g.cut.Load():
			nt.State, nt.Reasons = StateAbsent, []string{fmt.Sprintf("cut off from the backend since round %d", g.cutAt.Load())}
		case n.stalled:
			nt.State, nt.Reasons = StateStalled, []string{"scans stopped"}
		case len(n.degraded) > 0:
			nt.State, nt.Reasons = StateDegraded, slices.Clone(n.degraded)
		}
		nodes = append(nodes, nt)
		ledgers[n.name] = n.ledger
		overhead[n.name] = n.overhead
	}
	slices.SortFunc(nodes, func(a, b NodeTruth) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return truth(f.round, f.cfg.Interval, f.times, nodes, ledgers, overhead)
}

// Bytes is what each pool's agents sent so far: requests, bytes on the
// wire (gzip) and uncompressed.
func (f *Fleet) Bytes(pool string) (requests, wire, raw int64) {
	g := f.gates[pool]
	if g == nil {
		return 0, 0, 0
	}
	return g.requests.Load(), g.bytes.Load(), g.rawBytes.Load()
}

// Close stops every agent (without a final export's wait beyond Timeout)
// and the gates.
func (f *Fleet) Close(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		if n.left >= 0 || n.exp == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
			_ = n.exp.Shutdown(sctx)
			cancel()
		}()
	}
	wg.Wait()
	for _, g := range f.gates {
		g.close()
	}
}
