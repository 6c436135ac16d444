package agent

import (
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/stats"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/config"
)

// The per-program types live in agent/internal/prog, below the stats
// package that needs them too; the aliases keep them agent.Program,
// agent.Link... for consumers.
type (
	MissCauses  = prog.MissCauses
	LinkMisses  = prog.LinkMisses
	Program     = prog.Program
	Link        = prog.Link
	Owner       = owners.Owner
	Rates       = prog.Rates
	ProgramStat = prog.ProgramStat
	ProfileStat = prog.ProfileStat
)

// The reader (agent/internal/reader) fills ScanStats and reads the
// iterator facts; re-exported here for consumers.
type (
	ScanStats   = reader.ScanStats
	ProgFacts   = reader.ProgFacts
	FactsSource = reader.FactsSource
)

// Scan sources: where a scan reads programs and their counters from
// (reader.ScanSourceIterator, reader.ScanSourceSyscall).
const (
	ScanSourceIterator = reader.ScanSourceIterator
	ScanSourceSyscall  = reader.ScanSourceSyscall
)

// Unattached is the attach type of a program that no link or attachment
// names (reader.Unattached).
const Unattached = reader.Unattached

// ProgTypeName names a bpf_prog_type (reader.ProgTypeName).
func ProgTypeName(t uint32) string { return reader.ProgTypeName(t) }

// AttachTypeName names a bpf_attach_type (reader.AttachTypeName).
func AttachTypeName(t uint32) string { return reader.AttachTypeName(t) }

// LinkTypeName names a bpf_link_type (reader.LinkTypeName).
func LinkTypeName(t uint32) string { return reader.LinkTypeName(t) }

// MapTypeName names a bpf_map_type (reader.MapTypeName).
func MapTypeName(t uint32) string { return reader.MapTypeName(t) }

// Run-time stats' state and tax live in agent/internal/stats, which
// controls stats and computes them; re-exported here for consumers.
type (
	StatsState     = stats.StatsState
	StatsCost      = stats.StatsCost
	StatsTax       = stats.StatsTax
	ProgramTypeTax = stats.ProgramTypeTax
)

// What an interval's run counts are (StatsState.Counts).
const (
	CountsExact   = stats.CountsExact
	CountsSampled = stats.CountsSampled
)

// AttachTypeStat aggregates the programs of one attach type.
type AttachTypeStat struct {
	AttachType string `json:"attach_type"`
	Programs   int    `json:"programs"`
	RunCount   uint64 `json:"run_count"`
	RunTimeNs  uint64 `json:"run_time_ns"`
	// RecursionMisses sums the type's programs' recursion_misses; nil
	// where none of them has the counter (bpf_prog_info before Linux
	// 5.12): absent, not zero, as a program's own.
	RecursionMisses *uint64 `json:"recursion_misses"`
	LinkMissed      uint64  `json:"link_missed"`
	Delta           Rates   `json:"delta"`
	// OverheadNs is the agent's own calibration of this attach type on this
	// node: ns added per triggered call; nil when not calibrated.
	OverheadNs *float64 `json:"overhead_ns,omitempty"`
}

// OwnerStat aggregates the programs of one owner (process or container).
type OwnerStat struct {
	Key         string   `json:"key"` // container id, or "pid:N" without one
	PID         int      `json:"pid,omitempty"`
	Comm        string   `json:"comm,omitempty"`
	ContainerID string   `json:"container_id,omitempty"`
	PodUID      string   `json:"pod_uid,omitempty"`
	PodName     string   `json:"pod_name,omitempty"`
	Namespace   string   `json:"pod_namespace,omitempty"`
	ProgramIDs  []uint32 `json:"program_ids"`
	RunCount    uint64   `json:"run_count"`
	RunTimeNs   uint64   `json:"run_time_ns"`
	// RecursionMisses is as AttachTypeStat's: nil where none of the
	// owner's programs has the counter.
	RecursionMisses *uint64 `json:"recursion_misses"`
	Delta           Rates   `json:"delta"`
}

// Miss kinds: what a miss count most likely means on this kernel for this
// program (see ARCHITECTURE.md, "Misses that are not recursion").
const (
	MissKindRecursion          = "recursion"
	MissKindContentionPossible = "contention-possible"
	MissKindUnknown            = "unknown"
	// MissKindNone: no recursion guard covers the program, so the kernel
	// never counts a miss for it (iter, socket filter, XDP, tc, cgroup...).
	MissKindNone = "none"
)

// Miss causes (prog.Cause*): see prog/causes.go and docs/misses.md, "Why a
// program missed".
const (
	CauseRecursion   = prog.CauseRecursion
	CauseInterrupt   = prog.CauseInterrupt
	CausePreempted   = prog.CausePreempted
	CauseNested      = prog.CauseNested
	CauseUnexplained = prog.CauseUnexplained
)

// Causes lists every miss cause in display order.
var Causes = prog.Causes

// Reasons of a kprobe link miss (prog.LinkMissNesting...), in display order.
const (
	LinkMissNesting   = prog.LinkMissNesting
	LinkMissMaxactive = prog.LinkMissMaxactive
	LinkMissUnknown   = prog.LinkMissUnknown
)

// LinkMissReasons lists every link miss reason in display order.
var LinkMissReasons = prog.LinkMissReasons

// Contexts of a turned-away run, from the entry frames of its stack.
const (
	ContextTask    = "task"
	ContextSoftirq = "softirq"
	ContextHardirq = "hardirq"
	ContextNMI     = "nmi"
)

// MissSample is one miss of a watched program, as the miss watcher
// sampled it: where the kernel turned the run away and why.
type MissSample struct {
	// Time is when the kernel counted the miss.
	Time     time.Time `json:"time"`
	ProgID   uint32    `json:"prog_id"`
	ProgName string    `json:"prog_name"`
	CPU      int       `json:"cpu"`
	// Context is the turned-away run's: task, softirq, hardirq or nmi.
	Context string `json:"context"`
	// Cause is one of Causes (never unexplained: a sample explains).
	Cause string `json:"cause"`
	// The task that was running when the run was turned away.
	PID          int    `json:"pid"`
	TID          int    `json:"tid"`
	Comm         string `json:"comm,omitempty"`
	ContainerID  string `json:"container_id,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	// Stack is the kernel stack, innermost frame first (bounded depth):
	// "symbol+0xoff", a BPF program's "bpf_prog_<tag>_<name>+0xoff", or
	// the bare address where no symbol is known (MissWatch.Symbols says why).
	Stack []string `json:"stack"`
}

// MissWatch is the miss watcher's state in a snapshot.
type MissWatch struct {
	// Available says whether the kernel lets the agent watch misses; when
	// not, Reason says why in the kernel's words (every miss is then
	// unexplained).
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Slots is how many programs can be watched at once (the debug
	// registers free on every CPU, learned by trying); 0 until learned.
	Slots int `json:"slots"`
	// Budget is the samples each CPU may take per interval; past it a
	// program's watchpoints stay off until the next interval.
	Budget int `json:"budget"`
	// Watched are the programs watched in this interval.
	Watched []WatchedProgram `json:"watched"`
	// Waiting are programs with an open miss episode that wait for a slot.
	Waiting []uint32 `json:"waiting,omitempty"`
	// Blind are programs whose misses tripped no watchpoint while watched
	// (the kernel counts them where watchpoints do not fire: kprobes on
	// arm64): no longer watched, their misses unexplained.
	Blind []BlindProgram `json:"blind,omitempty"`
	// Samples and OverBudget are cumulative: misses sampled, and
	// watchpoint hits the budget turned off (counted, not sampled).
	Samples    uint64 `json:"samples"`
	OverBudget uint64 `json:"over_budget"`
	// Symbols says what really names a stack's frames: "kallsyms",
	// "program ranges only" (kallsyms reads zeros; the watched programs'
	// own frames are still told from their JIT ranges) or "none".
	Symbols string `json:"symbols,omitempty"`
	// Unseen says why no program's own code can be told on a stack: their
	// misses are then unexplained, never a cause read from that absence.
	Unseen string `json:"unseen,omitempty"`
}

// BlindProgram is a program the watcher gave up on: Misses were counted
// while it was watched, with the budget unspent, and none tripped a
// watchpoint.
type BlindProgram struct {
	ProgID   uint32 `json:"prog_id"`
	ProgName string `json:"prog_name"`
	Misses   uint64 `json:"misses"`
}

// WatchedProgram is one program the watcher watches.
type WatchedProgram struct {
	ProgID   uint32    `json:"prog_id"`
	ProgName string    `json:"prog_name"`
	Since    time.Time `json:"since"`
	Samples  uint64    `json:"samples"`
	// Ranges is where its JIT ranges came from ("bpf_prog iterator",
	// "jited_ksyms"), "" when none gave them (its misses unexplained).
	Ranges string `json:"ranges,omitempty"`
}

// Episode sources.
const (
	SourceRecursionMisses = "recursion_misses"
	SourceLinkMissed      = "link_missed"
)

// EpisodeInterval is one scan interval inside a miss episode.
type EpisodeInterval struct {
	Time   time.Time `json:"time"`
	Misses uint64    `json:"misses"`
	Runs   uint64    `json:"runs"`
	Rate   float64   `json:"rate"` // misses per second in this interval
}

// Episode is a run of intervals in which a program's recursion_misses (or a
// link's missed) grew, closed after a quiet period.
type Episode struct {
	// Source is recursion_misses or link_missed.
	Source string `json:"source"`
	ProgID uint32 `json:"prog_id"`
	LinkID uint32 `json:"link_id,omitempty"`
	// Program identity at the time the episode opened.
	ProgName     string `json:"prog_name"`
	ProgTag      string `json:"prog_tag"`
	ProgType     string `json:"prog_type"`
	AttachType   string `json:"attach_type"`
	AttachTarget string `json:"attach_target"`
	Sleepable    *bool  `json:"sleepable"`
	Kind         string `json:"kind"`

	Start time.Time `json:"start"`
	// End is the end of the last interval with misses.
	End      time.Time `json:"end"`
	Open     bool      `json:"open"`
	Misses   uint64    `json:"misses"`
	Runs     uint64    `json:"runs"`
	PeakRate float64   `json:"peak_rate"`
	// Intervals holds the intervals with misses (bounded: the oldest are
	// dropped past MaxEpisodeIntervals, and Truncated counts them).
	Intervals []EpisodeInterval `json:"intervals"`
	Truncated int               `json:"truncated,omitempty"`
	// Causes are the episode's misses by cause (adding up to Misses);
	// Contexts the sampled misses by context; Tasks and Stacks the most
	// frequent turned-away tasks and kernel stacks of its samples
	// (bounded: MaxEpisodeTop each).
	Causes MissCauses `json:"causes"`
	// LinkMissedBy is a link_missed episode's Misses by reason (adding
	// up to Misses); zero for a recursion_misses episode.
	LinkMissedBy LinkMisses        `json:"link_missed_by"`
	Contexts     map[string]uint64 `json:"contexts,omitempty"`
	Tasks        []EpisodeTask     `json:"tasks,omitempty"`
	Stacks       []EpisodeStack    `json:"stacks,omitempty"`
	// Reason says why a closed episode ended: "quiet", "vanished" (the
	// program was unloaded) or "shutdown" (the agent stopped).
	Reason string `json:"reason,omitempty"`
}

// EpisodeTask is a task whose runs were turned away in an episode.
type EpisodeTask struct {
	PID          int    `json:"pid"`
	Comm         string `json:"comm,omitempty"`
	ContainerID  string `json:"container_id,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	Misses       uint64 `json:"misses"` // sampled
}

// EpisodeStack is one distinct kernel stack of an episode's samples.
type EpisodeStack struct {
	Cause   string   `json:"cause"`
	Context string   `json:"context"`
	Stack   []string `json:"stack"`
	Misses  uint64   `json:"misses"` // sampled
}

// MissRatio is misses / (misses + runs) over the episode.
func (e *Episode) MissRatio() float64 {
	if e.Misses+e.Runs == 0 {
		return 0
	}
	return float64(e.Misses) / float64(e.Misses+e.Runs)
}

// KernelInfo describes the node's kernel and CPU.
type KernelInfo struct {
	Release  string `json:"release"`
	Version  string `json:"version"`
	Arch     string `json:"arch"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	// Preempt is the preemption model: PREEMPT_RT, PREEMPT_DYNAMIC (with
	// PreemptMode), PREEMPT, PREEMPT_VOLUNTARY, PREEMPT_NONE, PREEMPT_LAZY
	// or unknown.
	Preempt     string `json:"preempt"`
	PreemptMode string `json:"preempt_mode,omitempty"`
	// PreemptSource says where Preempt was read from.
	PreemptSource string `json:"preempt_source,omitempty"`
}

// Calibration is the agent's own measured cost of one attach type.
type Calibration struct {
	AttachType string `json:"attach_type"`
	// Mode is how the probe was triggered: "syscall" (getpgid from user
	// space) or "kernel" (an in-kernel driver, as selftests' bench does).
	Mode      string `json:"mode"`
	Supported bool   `json:"supported"`
	Reason    string `json:"reason,omitempty"`
	// Inconclusive is set when the probe could not tell whether the kernel
	// supports the attach type (a host mount or a privilege missing, not a
	// kernel refusal): the node lost a calibration it could have.
	Inconclusive bool    `json:"inconclusive,omitempty"`
	OverheadNs   float64 `json:"overhead_ns"`
}

// Snapshot is one scan with its deltas against the previous one. It is the
// only thing the agent hands to exporters, the API and the TUI; it is never
// mutated after it is returned.
type Snapshot struct {
	Seq      uint64        `json:"seq"`
	Time     time.Time     `json:"time"`
	Interval time.Duration `json:"interval_ns"` // since the previous scan; 0 for the first
	Kernel   KernelInfo    `json:"kernel"`
	Stats    StatsState    `json:"stats"`
	Scan     ScanStats     `json:"scan"`
	// Degraded says, one line each, what the agent cannot do on this node
	// and why, as "<feature>: <why>" (the Feature* names): a privilege or
	// host mount the agent lacks, a facility the kernel lacks or refused.
	Degraded []string `json:"degraded,omitempty"`

	// Programs are shared with other snapshots: an idle program's entry
	// (and, when nothing changed, the whole list) is the previous
	// snapshot's. Never write one.
	Programs    []*ProgramStat   `json:"programs"`
	AttachTypes []AttachTypeStat `json:"attach_types"`
	Owners      []OwnerStat      `json:"owners"`
	// Episodes holds the miss episodes that are open after this scan and
	// those that closed in it (Open=false).
	Episodes    []Episode     `json:"episodes"`
	Calibration []Calibration `json:"calibration,omitempty"`
	// AgentCPUShare is the agent process's own CPU time over the interval
	// (user + system, all threads), as a fraction of one CPU.
	AgentCPUShare float64 `json:"agent_cpu_share"`
	// StatsTax is what BPF run-time stats accounting costs this node.
	StatsTax StatsTax `json:"stats_tax"`
	// StatsCosts are the measured stats costs per run (calibration).
	StatsCosts []StatsCost `json:"stats_costs,omitempty"`
	// Maps is every BPF map on the node, ascending by id, with Config.Maps;
	// MapScan says how they were read. A map that did not move since the
	// last scan has the same entry (as programs do): never write one.
	Maps    []*Map  `json:"maps,omitempty"`
	MapScan MapScan `json:"map_scan"`
	// MissWatch is the miss watcher's state; Misses the misses it sampled
	// in this interval (bounded: MaxMissSamples, the newest kept), oldest
	// first.
	MissWatch MissWatch    `json:"miss_watch"`
	Misses    []MissSample `json:"misses,omitempty"`
}

// StatsMode is the agent's --stats (internal/config validates it).
type StatsMode = config.StatsMode

// Stats modes: how long the agent keeps BPF run-time stats on.
const (
	// StatsAlways holds a BPF_ENABLE_STATS fd for the agent's life.
	StatsAlways = config.StatsAlways
	// StatsSampled holds the fd for a window of each period; run counts
	// and run time are scaled from the windows.
	StatsSampled = config.StatsSampled
	// StatsOff never enables stats: misses, attach types and owners only.
	StatsOff = config.StatsOff
)

// LinkMissedOf is a link's cumulative missed by reason (unknown where the
// agent does not know the split); ok is false for a link without missed.
func LinkMissedOf(l *Link) (LinkMisses, bool) { return prog.LinkMissedOf(l) }

// SplitLinkMissed splits a growth of link missed by its parts' growths
// (prog.SplitLinkMissed).
func SplitLinkMissed(missed uint64, nesting, maxactive *uint64) LinkMisses {
	return prog.SplitLinkMissed(missed, nesting, maxactive)
}
