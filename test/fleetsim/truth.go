package fleetsim

import (
	"maps"
	"slices"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// Truth is what the fleet fed its backends, in the terms a fleet query
// answers in. Counters are the workload level's (exporter/METRICS.md,
// "bpf.program.run.count" at the workload level): per node and program
// name, what the node's agent counted since it started; an agent restart
// starts them over (a counter reset), a program loaded before the agent
// started counts from the agent's first scan, one loaded since with all
// it counted.
type Truth struct {
	// Round is the rounds run so far; Interval the simulated time each
	// stands for (the Delta of every snapshot).
	Round    int
	Interval time.Duration
	// RoundTimes is when each round's exports began (wall clock): a
	// backend's rate() divides by these, not by Interval.
	RoundTimes []time.Time
	Nodes      []NodeTruth     // by name
	Programs   []ProgramTruth  // by name
	Misses     []MissTruth     // by program, cause, node
	Overhead   []OverheadTruth // by attach type, kernel, pool
}

// Node states.
const (
	StateUp       = "up"
	StateAbsent   = "absent"   // left the fleet, or cut off from the backend
	StateStalled  = "stalled"  // exports, but its scans stopped
	StateDegraded = "degraded" // exports, blind to something (Reasons)
)

// NodeTruth is one node as the fleet left it.
type NodeTruth struct {
	Name, Pool, Kernel string
	State              string
	// Reasons say why a node is not up, one line each (for degraded: the
	// agent's Snapshot.Degraded lines).
	Reasons []string
	// Programs is how many programs the node runs now.
	Programs int
	// Restarts counts agent restarts; ExportErrors failed exports (the
	// agent counts them in bpf.agent.export.errors); LastExport is the
	// last round whose export the backend took (-1: none).
	Restarts, ExportErrors, LastExport int
	// Joined and Left are rounds (Left -1 while in the fleet).
	Joined, Left int
}

// Counts are a program's workload-level counters, with the last round's
// growth.
type Counts struct {
	Runs, RunTimeNs, Misses       uint64
	RoundRuns, RoundRunTimeNs     uint64
	RoundMisses                   uint64
	fedRuns, fedRunTimeNs, fedMis uint64
}

// ProgramTruth is one program name across the fleet: the sums over the
// nodes in the fleet (not those that left) of their counters.
type ProgramTruth struct {
	Name string
	Counts
	// FedRuns... are what the kernels counted since the fleet started,
	// across agent restarts and nodes that left: what the backend lacks
	// of them is what restarts and late first scans hid.
	FedRuns, FedRunTimeNs, FedMisses uint64
	// NsPerRun is the last round's run time per run fleet-wide; CPUShare
	// its run time per simulated Interval, in CPUs.
	NsPerRun, CPUShare float64
	// Nodes is how many nodes in the fleet run the program now.
	Nodes int
	// WorstNode has the most ns per run in the last round (ties: the first
	// by name); WorstNsPerRun is its figure.
	WorstNode     string
	WorstNsPerRun float64
	// PerNode is each node's counters (nodes that ran it).
	PerNode map[string]Counts
}

// MissTruth is one program's misses of one cause on one node.
type MissTruth struct {
	Program, Cause          string
	Node, Pool, Kernel, Pod string
	// Misses is the node's workload-level counter for the cause now.
	Misses uint64
	// FirstRound is the first round the cause grew for the program there.
	FirstRound int
}

// OverheadTruth is one attach type's calibrated overhead over the nodes of
// one pool (one kernel each), as the nodes export it
// (bpf.attach_type.overhead).
type OverheadTruth struct {
	AttachType, Kernel, Pool string
	Nodes                    int
	MinNs, MaxNs, MeanNs     float64
}

// instance is what the ledger reads of one loaded program in one round.
type instance struct {
	id                 uint64 // unique across the fleet's life
	name               string
	pod                string
	loadedAfterStart   bool // loaded after the node's agent started
	runs, runTimeNs    uint64
	misses             uint64
	causes             agent.MissCauses // since the agent first saw it
	fedRuns, fedTimeNs uint64           // this round's kernel growth
	fedMisses          uint64
}

type lastCounts struct {
	runs, runTimeNs, misses uint64
	causes                  agent.MissCauses
}

// ledger keeps one node's truth: its agent's view of every program it saw
// since it started, and the counters per name.
type ledger struct {
	last     map[uint64]lastCounts
	byName   map[string]*Counts
	causes   map[[2]string]uint64 // name, cause -> counter
	firstMis map[[2]string]int    // name, cause -> first round it grew
	pods     map[[2]string]string // name, cause -> pod of the latest growth
	loaded   map[string]bool      // names loaded in the last round
}

func newLedger() *ledger {
	return &ledger{byName: map[string]*Counts{}, causes: map[[2]string]uint64{}, firstMis: map[[2]string]int{}, pods: map[[2]string]string{}}
}

// restart is an agent restart: its counters start over; what the kernel
// counted (fed) stays.
func (l *ledger) restart() {
	l.last = nil
	for _, c := range l.byName {
		*c = Counts{fedRuns: c.fedRuns, fedRunTimeNs: c.fedRunTimeNs, fedMis: c.fedMis}
	}
	clear(l.causes)
}

func growth(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// observe is one scan the agent exported, with round's number.
func (l *ledger) observe(round int, insts []instance) {
	if l.last == nil {
		l.last = map[uint64]lastCounts{}
	}
	for _, c := range l.byName {
		c.RoundRuns, c.RoundRunTimeNs, c.RoundMisses = 0, 0, 0
	}
	l.loaded = map[string]bool{}
	seen := make(map[uint64]bool, len(insts))
	for _, in := range insts {
		seen[in.id] = true
		cur := lastCounts{in.runs, in.runTimeNs, in.misses, in.causes}
		prev, ok := l.last[in.id]
		if !ok && !in.loadedAfterStart {
			prev = cur
		}
		c := l.byName[in.name]
		if c == nil {
			c = &Counts{}
			l.byName[in.name] = c
		}
		l.loaded[in.name] = true
		r, t, m := growth(cur.runs, prev.runs), growth(cur.runTimeNs, prev.runTimeNs), growth(cur.misses, prev.misses)
		c.Runs += r
		c.RunTimeNs += t
		c.Misses += m
		c.RoundRuns += r
		c.RoundRunTimeNs += t
		c.RoundMisses += m
		c.fedRuns += in.fedRuns
		c.fedRunTimeNs += in.fedTimeNs
		c.fedMis += in.fedMisses
		for _, cause := range agent.Causes {
			g := growth(cur.causes.Get(cause), prev.causes.Get(cause))
			if g == 0 {
				continue
			}
			k := [2]string{in.name, cause}
			l.causes[k] += g
			l.pods[k] = in.pod
			if _, ok := l.firstMis[k]; !ok {
				l.firstMis[k] = round
			}
		}
		l.last[in.id] = cur
	}
	for id := range l.last {
		if !seen[id] {
			delete(l.last, id) // unloaded: adds nothing more
		}
	}
}

// fed adds kernel growth the agent did not see (a stalled agent, or no
// agent): fed totals only.
func (l *ledger) fed(insts []instance) {
	for _, in := range insts {
		c := l.byName[in.name]
		if c == nil {
			c = &Counts{}
			l.byName[in.name] = c
		}
		c.fedRuns += in.fedRuns
		c.fedRunTimeNs += in.fedTimeNs
		c.fedMis += in.fedMisses
	}
}

// truth sums the nodes' ledgers; in says which nodes count (in the fleet).
func truth(round int, interval time.Duration, times []time.Time, nodes []NodeTruth, ledgers map[string]*ledger, overhead map[string]map[string]float64) *Truth {
	t := &Truth{Round: round, Interval: interval, RoundTimes: slices.Clone(times), Nodes: nodes}
	progs := map[string]*ProgramTruth{}
	byNode := map[string]NodeTruth{}
	for _, n := range nodes {
		byNode[n.Name] = n
	}
	type ovKey struct{ at, kernel, pool string }
	ov := map[ovKey]*OverheadTruth{}
	for _, n := range nodes {
		l := ledgers[n.Name]
		if l == nil {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(l.byName)) {
			c := l.byName[name]
			p := progs[name]
			if p == nil {
				p = &ProgramTruth{Name: name, PerNode: map[string]Counts{}}
				progs[name] = p
			}
			p.FedRuns += c.fedRuns
			p.FedRunTimeNs += c.fedRunTimeNs
			p.FedMisses += c.fedMis
			if n.Left >= 0 {
				continue
			}
			p.Runs += c.Runs
			p.RunTimeNs += c.RunTimeNs
			p.Misses += c.Misses
			p.RoundRuns += c.RoundRuns
			p.RoundRunTimeNs += c.RoundRunTimeNs
			p.RoundMisses += c.RoundMisses
			p.PerNode[n.Name] = *c
			if l.loaded[name] {
				p.Nodes++
			}
			if c.RoundRuns > 0 {
				if npr := float64(c.RoundRunTimeNs) / float64(c.RoundRuns); npr > p.WorstNsPerRun {
					p.WorstNode, p.WorstNsPerRun = n.Name, npr
				}
			}
		}
		if n.Left >= 0 {
			continue
		}
		for k, v := range l.causes {
			if v == 0 {
				continue
			}
			t.Misses = append(t.Misses, MissTruth{Program: k[0], Cause: k[1], Node: n.Name, Pool: n.Pool, Kernel: n.Kernel, Pod: l.pods[k], Misses: v, FirstRound: l.firstMis[k]})
		}
		for at, ns := range overhead[n.Name] {
			k := ovKey{at, n.Kernel, n.Pool}
			o := ov[k]
			if o == nil {
				o = &OverheadTruth{AttachType: at, Kernel: n.Kernel, Pool: n.Pool, MinNs: ns, MaxNs: ns}
				ov[k] = o
			}
			o.Nodes++
			o.MinNs, o.MaxNs = min(o.MinNs, ns), max(o.MaxNs, ns)
			o.MeanNs += ns
		}
	}
	for _, name := range slices.Sorted(maps.Keys(progs)) {
		p := progs[name]
		p.Counts.fedRuns, p.Counts.fedRunTimeNs, p.Counts.fedMis = 0, 0, 0
		if p.RoundRuns > 0 {
			p.NsPerRun = float64(p.RoundRunTimeNs) / float64(p.RoundRuns)
		}
		if interval > 0 {
			p.CPUShare = float64(p.RoundRunTimeNs) / float64(interval.Nanoseconds())
		}
		t.Programs = append(t.Programs, *p)
	}
	slices.SortFunc(t.Misses, func(a, b MissTruth) int {
		for _, c := range [][2]string{{a.Program, b.Program}, {a.Cause, b.Cause}, {a.Node, b.Node}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	for _, o := range ov {
		o.MeanNs /= float64(o.Nodes)
		t.Overhead = append(t.Overhead, *o)
	}
	slices.SortFunc(t.Overhead, func(a, b OverheadTruth) int {
		for _, c := range [][2]string{{a.AttachType, b.AttachType}, {a.Kernel, b.Kernel}, {a.Pool, b.Pool}} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return t
}

// Program is the truth of one program name (nil: the fleet never ran it).
func (t *Truth) Program(name string) *ProgramTruth {
	for i := range t.Programs {
		if t.Programs[i].Name == name {
			return &t.Programs[i]
		}
	}
	return nil
}

// Node is the truth of one node (nil: no such node).
func (t *Truth) Node(name string) *NodeTruth {
	for i := range t.Nodes {
		if t.Nodes[i].Name == name {
			return &t.Nodes[i]
		}
	}
	return nil
}

// InFleet counts the nodes that have not left (up, stalled, degraded, or
// cut off).
func (t *Truth) InFleet() int {
	n := 0
	for _, x := range t.Nodes {
		if x.Left < 0 {
			n++
		}
	}
	return n
}
