package fleetsim

import (
	"fmt"
	"math/rand/v2"
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
}

type simPod struct {
	name, uid, namespace, kind, workload, container, hostIf string
	progs                                                   []*simProg
}

// node is one simulated node.
type node struct {
	name, pool, kernel string
	idx                int
	rec                *agent.Snapshot
	tmpl               map[Role][]*agent.ProgramStat
	roles              []Role
	rng                *rand.Rand
	factor             float64 // the node's load
	progs              []*simProg
	pods               []*simPod
	nextID             uint32
	podSeq             int
	exp                *exporter.Exporter
	agentGen           int
	seq                uint64
	overhead           map[string]float64
	calib              []agent.Calibration
	ledger             *ledger
	// state
	joined, left           int
	restarts, exportErrors int
	lastExport             int
	stalled                bool
	degraded               []string
	noStats, noWatcher     bool
	extraMiss              []*MissPlan
	upgraded               map[string]string // program name -> tag after the upgrade
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
		s.Stats.Mode = agent.StatsOff
	}
	s.Scan.Programs = len(n.progs)
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
		if n.noStats {
			e.RunCount, e.RunTimeNs = 0, 0
		}
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
			if n.noStats {
				e.Delta.Runs, e.Delta.RunTimeNs = 0, 0
			}
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
		} else {
			e.New = true
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
