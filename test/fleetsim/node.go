package fleetsim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/exporter"
)

// simProg is one loaded program on a simulated node: the kernel's side
// (cumulative counters from its load) and the agent's (miss causes since
// the agent first saw it).
type simProg struct {
	uid  uint64 // unique in the fleet's life (the ledger's key)
	id   uint32 // the node's bpf id
	tmpl *agent.ProgramStat
	tag  string
	pod  *simPod // the pod it is per, nil for per-node programs
	// per round, from the seed
	runs, nsPerRun, misses uint64
	loadTime               time.Time
	loadedAfterStart       bool

	runCnt, runTimeNs, recMisses uint64
	causes                       agent.MissCauses // since the agent first saw it
	seenBy                       int              // agent incarnation that saw it last
	entry                        *agent.ProgramStat
	// ep is the program's open miss episode (nil: none), quiet the
	// rounds since its misses last grew.
	ep    *agent.Episode
	quiet int
}

// quietRounds closes an episode after that many rounds without misses,
// as the agent with QuietIntervals 2.
const quietRounds = 2

// episode moves sp's miss episode by one round with gr's growth at now:
// opened where the misses grew, closed (returned) after quietRounds
// without.
func (n *node) episode(sp *simProg, e *agent.ProgramStat, gr [3]uint64, dc agent.MissCauses, now time.Time, secs float64) (closed *agent.Episode) {
	if gr[2] == 0 {
		if sp.ep == nil {
			return nil
		}
		if sp.quiet++; sp.quiet < quietRounds {
			return nil
		}
		ep := *sp.ep
		ep.Open, ep.Reason = false, "quiet"
		sp.ep = nil
		n.episodesClosed++
		return &ep
	}
	sp.quiet = 0
	if sp.ep == nil {
		sp.ep = &agent.Episode{
			Source: agent.SourceRecursionMisses, ProgID: e.ID, ProgName: e.Name, ProgTag: e.Tag, ProgType: e.Type,
			AttachType: e.AttachType, AttachTarget: e.AttachTarget, Sleepable: e.Sleepable, Kind: e.MissKind,
			Start: now.Add(-time.Duration(secs * float64(time.Second))), Open: true,
		}
		n.episodesOpened++
	}
	ep := *sp.ep // a new value each round: snapshots are never written
	ep.End = now
	ep.Misses += gr[2]
	ep.Runs += gr[0]
	rate := float64(gr[2]) / secs
	ep.PeakRate = max(ep.PeakRate, rate)
	ep.Causes.Plus(dc)
	ep.Intervals = append(append([]agent.EpisodeInterval(nil), ep.Intervals...), agent.EpisodeInterval{Time: now, Misses: gr[2], Runs: gr[0], Rate: rate})
	if len(ep.Intervals) > agent.MaxEpisodeIntervals {
		ep.Truncated += len(ep.Intervals) - agent.MaxEpisodeIntervals
		ep.Intervals = ep.Intervals[len(ep.Intervals)-agent.MaxEpisodeIntervals:]
	}
	sp.ep = &ep
	return nil
}

// vanished closes sp's open episode: its program unloaded.
func (n *node) vanished(sp *simProg) {
	if sp.ep == nil {
		return
	}
	ep := *sp.ep
	ep.Open, ep.Reason = false, "vanished"
	n.closing = append(n.closing, ep)
	n.episodesClosed++
	sp.ep = nil
}

// endEpisodes ends the open episodes as the agent does when it stops
// (Exporter.EndEpisodes: closed spans, "shutdown").
func (n *node) endEpisodes(ctx context.Context) {
	eps := n.openEpisodes()
	if len(eps) == 0 {
		return
	}
	n.exp.EndEpisodes(ctx, eps)
	n.episodesClosed += len(eps)
	for _, sp := range n.progs {
		sp.ep, sp.quiet = nil, 0
	}
}

// openEpisodes are the node's open episodes (for EndEpisodes when its
// agent stops).
func (n *node) openEpisodes() []agent.Episode {
	var out []agent.Episode
	for _, sp := range n.progs {
		if sp.ep != nil {
			out = append(out, *sp.ep)
		}
	}
	return out
}

type simPod struct {
	name, uid, namespace, kind, workload, container, hostIf string
	progs                                                   []*simProg
}

// node is one simulated node.
type node struct {
	name, pool, kernel string
	// clock is the node's time at its latest scan, in Unix ns, on the
	// fleet's simulated clock: its agent stamps with it (an export the
	// agent started on its own stamps the scan it read, as a real one
	// reads the wall clock then; never the next round's time).
	clock    atomic.Int64
	idx      int
	rec      *agent.Snapshot
	tmpl     map[Role][]*agent.ProgramStat
	roles    []Role
	spans    bool // episodes, as spans
	rng      *rand.Rand
	factor   float64 // the node's load
	progs    []*simProg
	pods     []*simPod
	nextID   uint32
	podSeq   int
	exp      *exporter.Exporter
	agentGen int
	seq      uint64
	overhead map[string]float64
	calib    []agent.Calibration
	ledger   *ledger
	// state
	joined, left           int
	restarts, exportErrors int
	lastExport             int
	stalled                bool
	degraded               []string
	noStats, noWatcher     bool
	extraMiss              []*MissPlan
	upgraded               map[string]string // program name -> tag after the upgrade
	// closing are episodes of programs that unloaded, for the next scan;
	// episodesOpened and episodesClosed count the spans the agent emits.
	closing                        []agent.Episode
	episodesOpened, episodesClosed int
}

// rateOf is a template's runs per simulated second: recorded, else (an
// idle program at recording time, such as a pod's network programs with
// no traffic) drawn from the seed by role.
func (n *node) rateOf(t *agent.ProgramStat, r Role) float64 {
	if t.Delta.RunsPerSec > 0 {
		return t.Delta.RunsPerSec
	}
	switch r {
	case RoleCNI:
		return 20 + 480*n.rng.Float64()
	case RoleRunc:
		return 0.1 + n.rng.Float64()
	}
	return 1 + 50*n.rng.Float64()
}

func (n *node) nsOf(t *agent.ProgramStat) float64 {
	if t.Delta.NsPerRun > 0 {
		return t.Delta.NsPerRun
	}
	return 40 + 200*n.rng.Float64()
}

// load loads one program of template t (for pod p, nil for the node).
func (n *node) load(f *Fleet, t *agent.ProgramStat, r Role, p *simPod, now time.Time, afterStart bool) *simProg {
	n.nextID++
	f.uid++
	perSec := n.rateOf(t, r) * n.factor * (0.9 + 0.2*n.rng.Float64())
	secs := f.cfg.Interval.Seconds()
	sp := &simProg{
		uid: f.uid, id: n.nextID, tmpl: t, tag: t.Tag, pod: p,
		runs:     uint64(perSec*secs + 0.5),
		nsPerRun: uint64(n.nsOf(t)*(0.8+0.4*n.rng.Float64()) + 0.5),
		loadTime: now, loadedAfterStart: afterStart,
	}
	if tag, ok := n.upgraded[t.Name]; ok {
		sp.tag = tag
	}
	if t.RecursionMisses != nil && t.Delta.MissesPerSec > 0 {
		// The recorded program missed (the canary: every run); it goes on
		// missing at its rate, unexplained as recorded.
		sp.misses = uint64(t.Delta.MissesPerSec*n.factor*secs + 0.5)
		if sp.misses > sp.runs {
			sp.runs = sp.misses
		}
	}
	n.progs = append(n.progs, sp)
	if p != nil {
		p.progs = append(p.progs, sp)
	}
	return sp
}

// startPod starts one pod of workload w (nil: one drawn from the seed)
// with the node's per-pod programs.
func (n *node) startPod(f *Fleet, w *[3]string, now time.Time, afterStart bool) {
	n.podSeq++
	if w == nil {
		w = &f.workloads[n.rng.IntN(len(f.workloads))]
	}
	hash := fmt.Sprintf("%08x", n.rng.Uint32())
	p := &simPod{
		name:      fmt.Sprintf("%s-%s-%d", w[2], hash[:5], n.podSeq),
		uid:       fmt.Sprintf("%s-%04x-%s", hash, n.idx, n.name),
		namespace: w[0], kind: w[1], workload: w[2],
		container: fmt.Sprintf("%016x%016x", n.rng.Uint64(), n.rng.Uint64()),
		hostIf:    "lxc" + hash + "abcd",
	}
	for _, r := range []Role{RoleCNI, RoleRunc} {
		if !n.has(r) {
			continue
		}
		for _, t := range n.tmpl[r] {
			n.load(f, t, r, p, now, afterStart)
		}
	}
	n.pods = append(n.pods, p)
}

// stopPod unloads a pod's programs and says its workload.
func (n *node) stopPod(i int) *[3]string {
	p := n.pods[i]
	n.pods = append(n.pods[:i], n.pods[i+1:]...)
	gone := map[*simProg]bool{}
	for _, sp := range p.progs {
		gone[sp] = true
		n.vanished(sp)
	}
	kept := n.progs[:0]
	for _, sp := range n.progs {
		if !gone[sp] {
			kept = append(kept, sp)
		}
	}
	n.progs = kept
	return &[3]string{p.namespace, p.kind, p.workload}
}

func (n *node) has(r Role) bool {
	for _, x := range n.roles {
		if x == r {
			return true
		}
	}
	return false
}

// owner is the process or pod that holds sp, as the agent's attribution
// names it.
func (n *node) owners(sp *simProg, r Role) []agent.Owner {
	switch {
	case r == RoleRunc && sp.pod != nil:
		p := sp.pod
		return []agent.Owner{{ContainerID: p.container, PodUID: p.uid, PodName: p.name, PodNamespace: p.namespace, WorkloadKind: p.kind, WorkloadName: p.workload, Via: "attachment"}}
	case r == RoleCNI:
		return []agent.Owner{n.daemon("kube-system", "cni-agent", 1000)}
	case r == RoleSecurity:
		return []agent.Owner{n.daemon("security", "secagent", 2000)}
	}
	return []agent.Owner{{PID: 900, Comm: "node-agent", Exe: "/usr/bin/node-agent", Via: owners.ViaFD}}
}

func (n *node) daemon(ns, name string, pid int) agent.Owner {
	return agent.Owner{
		PID: pid, Comm: name, Exe: "/usr/bin/" + name, Via: owners.ViaFD,
		ContainerID: fmt.Sprintf("%s%08x%040x", name[:3], n.idx, 0), PodUID: fmt.Sprintf("%s-%s", name, n.name),
		PodName: fmt.Sprintf("%s-%s", name, n.name), PodNamespace: ns, WorkloadKind: "DaemonSet", WorkloadName: name,
	}
}

// advance moves the kernel's counters by one round and returns the
// round's growth of each loaded program (for the fed totals).
func (n *node) advance(round int) map[uint64][3]uint64 {
	g := make(map[uint64][3]uint64, len(n.progs))
	for _, sp := range n.progs {
		runs := sp.runs
		if n.noStats {
			runs = 0 // run-time stats off: the kernel counts no runs, misses still
		}
		t := runs * sp.nsPerRun
		m := sp.misses
		var add agent.MissCauses
		add.Unexplained = m
		for _, mp := range n.extraMiss {
			if mp.Program == sp.tmpl.Name && round >= mp.From && (mp.To == 0 || round < mp.To) && sp.tmpl.RecursionMisses != nil {
				m += mp.PerRound
				add.Add(mp.Cause, mp.PerRound)
			}
		}
		sp.runCnt += runs
		sp.runTimeNs += t
		sp.recMisses += m
		sp.causes.Plus(add)
		g[sp.uid] = [3]uint64{runs, t, m}
	}
	return g
}

// snapshot is the node's scan for this round, as the agent would hand
// it to the exporter.
func (n *node) snapshot(f *Fleet, now time.Time, grow map[uint64][3]uint64) (*agent.Snapshot, []instance) {
	n.seq++
	s := &agent.Snapshot{
		Seq: n.seq, Time: now, Interval: f.cfg.Interval, Kernel: n.rec.Kernel,
		Stats:       agent.StatsState{Enabled: !n.noStats, HeldByAgent: !n.noStats, Mode: agent.StatsAlways, Counts: agent.CountsExact},
		Scan:        n.rec.Scan,
		Calibration: n.calib,
		// The watcher as the recorded kernel answered (an emulator's or
		// a host's refusal included), unless the node is degraded.
		MissWatch: agent.MissWatch{Available: n.rec.MissWatch.Available, Reason: n.rec.MissWatch.Reason, Slots: n.rec.MissWatch.Slots,
			Budget: n.rec.MissWatch.Budget, Symbols: n.rec.MissWatch.Symbols},
		Degraded: n.degraded,
	}
	if n.noWatcher {
		s.MissWatch.Available = false
		s.MissWatch.Reason = "not supported: perf_event_open of a hardware watchpoint on kernel memory: operation not permitted"
	}
	if n.noStats {
		// --stats=always, and the kernel said no: the agent holds no
		// stats fd, and the kernel counts no runs (advance).
		s.Stats.Error = "BPF_ENABLE_STATS: operation not permitted"
	}
	s.Scan.Programs = len(n.progs)
	s.Episodes = append(s.Episodes, n.closing...)
	n.closing = nil
	insts := make([]instance, 0, len(n.progs))
	type atSum struct{ st agent.AttachTypeStat }
	ats := map[string]*atSum{}
	var order []string
	secs := f.cfg.Interval.Seconds()
	for _, sp := range n.progs {
		r := roleOf(sp.tmpl)
		newToAgent := sp.seenBy != n.agentGen
		if newToAgent {
			// The agent's causes start with what the program missed
			// before it saw it: unexplained.
			sp.causes = agent.MissCauses{Unexplained: sp.recMisses}
			sp.seenBy = n.agentGen
		}
		gr := grow[sp.uid]
		e := &agent.ProgramStat{Program: sp.tmpl.Program, New: sp.entry == nil}
		e.ID, e.Tag, e.LoadTime = sp.id, sp.tag, sp.loadTime
		e.RunCount, e.RunTimeNs = sp.runCnt, sp.runTimeNs
		e.Owners = n.owners(sp, r)
		e.Links = nil
		for _, l := range sp.tmpl.Links {
			l.ID, l.ProgID = sp.id+1<<20, sp.id
			if l.Missed != nil {
				z := uint64(0)
				l.Missed, l.MissedNesting, l.MissedMaxactive = &z, nil, nil
			}
			e.Links = append(e.Links, l)
		}
		if sp.pod != nil {
			p := sp.pod
			switch {
			case r == RoleCNI && (sp.tmpl.AttachType == "cgroup_inet_ingress" || sp.tmpl.AttachType == "cgroup_inet_egress" || sp.tmpl.AttachType == "cgroup_inet_sock_create"),
				r == RoleRunc:
				e.AttachTarget = "/sys/fs/cgroup/kubepods.slice/kubepods-pod" + p.uid + ".slice"
				e.TargetClass = owners.WorkloadClass(p.namespace, p.kind, p.workload)
			case r == RoleCNI:
				e.AttachTarget = p.hostIf
				e.TargetClass = owners.NetdevWorkloadClass("veth", p.namespace, p.kind, p.workload)
			}
		}
		if sp.tmpl.RecursionMisses != nil {
			m := sp.recMisses
			e.RecursionMisses = &m
			c := sp.causes
			e.MissCauses = &c
		}
		if sp.entry != nil && !newToAgent {
			e.Delta = agent.Rates{Runs: gr[0], RunTimeNs: gr[1], Misses: gr[2]}
			e.Delta.RunsPerSec = float64(e.Delta.Runs) / secs
			e.Delta.MissesPerSec = float64(e.Delta.Misses) / secs
			if e.Delta.Runs > 0 {
				e.Delta.NsPerRun = float64(e.Delta.RunTimeNs) / float64(e.Delta.Runs)
			}
			e.Delta.CPUShare = float64(e.Delta.RunTimeNs) / float64(f.cfg.Interval.Nanoseconds())
			if sp.tmpl.RecursionMisses != nil {
				if prev := sp.entry.MissCauses; prev != nil {
					for _, c := range agent.Causes {
						e.DeltaCauses.Add(c, growth(sp.causes.Get(c), prev.Get(c)))
					}
				}
			}
			if n.spans && sp.tmpl.RecursionMisses != nil {
				if ep := n.episode(sp, e, gr, e.DeltaCauses, now, secs); ep != nil {
					s.Episodes = append(s.Episodes, *ep)
				}
			}
		} else {
			e.New = true
		}
		if sp.ep != nil {
			s.Episodes = append(s.Episodes, *sp.ep)
		}
		sp.entry = e
		s.Programs = append(s.Programs, e)
		a := ats[e.AttachType]
		if a == nil {
			a = &atSum{st: agent.AttachTypeStat{AttachType: e.AttachType}}
			ats[e.AttachType] = a
			order = append(order, e.AttachType)
		}
		a.st.Programs++
		a.st.RunCount += e.RunCount
		a.st.RunTimeNs += e.RunTimeNs
		a.st.Delta.Runs += e.Delta.Runs
		a.st.Delta.RunTimeNs += e.Delta.RunTimeNs
		a.st.Delta.Misses += e.Delta.Misses
		if e.RecursionMisses != nil {
			if a.st.RecursionMisses == nil {
				a.st.RecursionMisses = new(uint64)
			}
			*a.st.RecursionMisses += *e.RecursionMisses
		}
		in := instance{id: sp.uid, name: sp.tmpl.Name, loadedAfterStart: sp.loadedAfterStart, runs: e.RunCount, runTimeNs: e.RunTimeNs,
			fedRuns: gr[0], fedTimeNs: gr[1], fedMisses: gr[2]}
		if sp.pod != nil && r == RoleRunc {
			in.pod = sp.pod.name
		} else if len(e.Owners) > 0 {
			in.pod = e.Owners[0].PodName
		}
		if e.RecursionMisses != nil {
			in.misses = *e.RecursionMisses
			in.causes = *e.MissCauses
		}
		insts = append(insts, in)
	}
	for _, at := range order {
		s.AttachTypes = append(s.AttachTypes, ats[at].st)
	}
	return s, insts
}
