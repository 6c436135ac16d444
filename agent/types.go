package agent

import (
	"github.com/bpfleet/bpfleet/agent/internal/misses"
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

// The miss explanation's types (agent/internal/misses), re-exported.
type (
	MissSample      = misses.MissSample
	MissWatch       = misses.MissWatch
	BlindProgram    = misses.BlindProgram
	WatchedProgram  = misses.WatchedProgram
	Episode         = misses.Episode
	EpisodeInterval = misses.EpisodeInterval
	EpisodeTask     = misses.EpisodeTask
	EpisodeStack    = misses.EpisodeStack
)

// Contexts of a turned-away run, from the entry frames of its stack.
const (
	ContextTask    = misses.ContextTask
	ContextSoftirq = misses.ContextSoftirq
	ContextHardirq = misses.ContextHardirq
	ContextNMI     = misses.ContextNMI
)

// Bounds of what the miss explanation keeps (misses.Max*).
const (
	MaxEpisodeIntervals = misses.MaxEpisodeIntervals
	MaxEpisodeTop       = misses.MaxEpisodeTop
	MaxMissSamples      = misses.MaxMissSamples
)

// Episode sources.
const (
	SourceRecursionMisses = misses.SourceRecursionMisses
	SourceLinkMissed      = misses.SourceLinkMissed
)

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
