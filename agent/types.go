package agent

import "time"

// Program is one BPF program as one scan saw it: identity and cumulative
// counters straight from bpf_prog_info, plus what the agent joined to it
// (links, owners, iterator facts).
//
// Optional kernel fields are pointers: nil means the running kernel does not
// expose the field (an older bpf_prog_info), which is not the same as zero.
type Program struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	Tag  string `json:"tag"`
	// Type is the program type as the kernel names it, e.g. "tracing",
	// "raw_tracepoint", "kprobe", "xdp".
	Type string `json:"type"`
	// AttachType is the attach type as a user writes it in a SEC() name:
	// fentry, fexit, fmod_ret, fentry.s, lsm, tp_btf, raw_tp, tracepoint,
	// kprobe, kretprobe, kprobe.multi, uprobe, iter, xdp, tcx_ingress, ...
	// "unattached" when no link or attachment names one.
	AttachType string `json:"attach_type"`
	// AttachTarget is the function, tracepoint, interface or cgroup the
	// program is attached to, empty when unknown.
	AttachTarget string `json:"attach_target"`
	// TargetClass is AttachTarget with what names one instance replaced by
	// its class, what the workload metrics level keys series by: a cgroup
	// by its pod's workload (namespace/kind/name) or QoS class
	// (kubepods/burstable), its runtime or its systemd slice; an interface
	// made per pod by its pod's workload or its driver and name prefix
	// (veth:lxc*); a binary's path without pid or container id (see
	// owners.CgroupClass, NetdevClass, PathClass and exporter/METRICS.md).
	// Empty when AttachTarget has no such part.
	TargetClass string `json:"target_class,omitempty"`
	// Sleepable is nil when the kernel gave no answer.
	Sleepable *bool `json:"sleepable"`
	// MissKind says what a recursion miss of this program means on this
	// kernel: recursion, contention-possible, unknown or none (see README).
	MissKind string `json:"miss_kind"`

	LoadTime      time.Time `json:"load_time"`
	UID           *uint32   `json:"uid"`
	MapIDs        []uint32  `json:"map_ids"`
	BTFID         uint32    `json:"btf_id,omitempty"`
	JitedSize     uint32    `json:"jited_size"`
	XlatedSize    uint32    `json:"xlated_size"`
	Memlock       *uint64   `json:"memlock"`
	VerifiedInsns *uint32   `json:"verified_insns"`

	RunCount        uint64  `json:"run_count"`
	RunTimeNs       uint64  `json:"run_time_ns"`
	RecursionMisses *uint64 `json:"recursion_misses"`

	Links  []Link   `json:"links"`
	Owners []Owner  `json:"owners"`
	Pins   []string `json:"pins,omitempty"`
}

// Link is one bpf_link and what its info says about the attachment.
type Link struct {
	ID     uint32 `json:"id"`
	ProgID uint32 `json:"prog_id"`
	// Type is the link type: tracing, raw_tracepoint, perf_event,
	// kprobe_multi, uprobe_multi, xdp, tcx, cgroup, netns, iter, ...
	Type       string `json:"type"`
	AttachType string `json:"attach_type"`
	// Target is the function, tracepoint, binary, interface or cgroup
	// (its path; cgroup:<id> when the agent cannot open it by id).
	Target string `json:"target"`
	// TargetClass is Target's class (as Program.TargetClass); empty when
	// Target has nothing per instance.
	TargetClass string `json:"target_class,omitempty"`
	// Missed is the kprobe's own missed counter (perf_event kprobe and
	// kprobe_multi links, Linux 6.7+); nil when the kernel has none.
	Missed *uint64 `json:"missed"`
	// pod is what the target says about the pod it belongs to, for the
	// attribution to name the pod's workload; nil for most links (a
	// pointer: every scan copies every link).
	pod *targetPod
}

// targetPod is what a cgroup or interface target says about its pod: the
// pod UID in a cgroup's path, or for an interface whose other end is in
// another network namespace (a CNI's host end) the interface and that
// namespace's id (plus one: 0 is none).
type targetPod struct {
	uid       string
	kind      string // the interface's driver
	ifindex   int
	peerNetns int64
}

// Owner is a process that holds an fd of the program or of one of its links.
type Owner struct {
	PID         int    `json:"pid"`
	Comm        string `json:"comm"`
	Exe         string `json:"exe,omitempty"`
	Cgroup      string `json:"cgroup,omitempty"`
	ContainerID string `json:"container_id"`
	// Runtime is the container runtime the cgroup path names:
	// containerd, cri-o, docker, podman.
	Runtime string `json:"runtime,omitempty"`
	PodUID  string `json:"pod_uid"`
	// Pod fields are filled by an optional Kubernetes resolver.
	PodName       string `json:"pod_name,omitempty"`
	PodNamespace  string `json:"pod_namespace,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	// WorkloadKind and WorkloadName name the pod's controller, what stays
	// when the pod is replaced: DaemonSet, Deployment (a ReplicaSet's
	// owner), StatefulSet, Job, CronJob, ... Empty for a pod no controller
	// owns.
	WorkloadKind string `json:"workload_kind,omitempty"`
	WorkloadName string `json:"workload_name,omitempty"`
	// Via says how the ownership was found: "fd" (holds the program's fd),
	// "link" (holds only a link of it) or "attachment" (no process holds
	// it; the container is the one whose cgroup it is attached to).
	Via string `json:"via"`
}

// Rates are one interval's deltas of a program's (or an aggregate's)
// cumulative counters and the rates derived from them.
type Rates struct {
	Runs      uint64 `json:"runs"`
	RunTimeNs uint64 `json:"run_time_ns"`
	Misses    uint64 `json:"misses"`
	// LinkMissed is the delta of the links' kprobe missed counters.
	LinkMissed   uint64  `json:"link_missed"`
	RunsPerSec   float64 `json:"runs_per_sec"`
	NsPerRun     float64 `json:"ns_per_run"`
	CPUShare     float64 `json:"cpu_share"` // fraction of one CPU, 1.0 = one whole CPU
	MissesPerSec float64 `json:"misses_per_sec"`
}

// ProgramStat is a program with its interval rates.
type ProgramStat struct {
	Program
	Delta Rates `json:"delta"`
	// New is true in the first snapshot that saw this program: its delta is
	// zero because there is no earlier sample to subtract.
	New bool `json:"new"`
	// Profile is set for programs chosen by Config.Profile.
	Profile *ProfileStat `json:"profile,omitempty"`
}

// AttachTypeStat aggregates the programs of one attach type.
type AttachTypeStat struct {
	AttachType      string `json:"attach_type"`
	Programs        int    `json:"programs"`
	RunCount        uint64 `json:"run_count"`
	RunTimeNs       uint64 `json:"run_time_ns"`
	RecursionMisses uint64 `json:"recursion_misses"`
	LinkMissed      uint64 `json:"link_missed"`
	Delta           Rates  `json:"delta"`
	// OverheadNs is the agent's own calibration of this attach type on this
	// node: ns added per triggered call; nil when not calibrated.
	OverheadNs *float64 `json:"overhead_ns,omitempty"`
}

// OwnerStat aggregates the programs of one owner (process or container).
type OwnerStat struct {
	Key             string   `json:"key"` // container id, or "pid:N" without one
	PID             int      `json:"pid,omitempty"`
	Comm            string   `json:"comm,omitempty"`
	ContainerID     string   `json:"container_id,omitempty"`
	PodUID          string   `json:"pod_uid,omitempty"`
	PodName         string   `json:"pod_name,omitempty"`
	Namespace       string   `json:"pod_namespace,omitempty"`
	ProgramIDs      []uint32 `json:"program_ids"`
	RunCount        uint64   `json:"run_count"`
	RunTimeNs       uint64   `json:"run_time_ns"`
	RecursionMisses uint64   `json:"recursion_misses"`
	Delta           Rates    `json:"delta"`
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
	// Reason says why a closed episode ended: "quiet", "vanished" (the
	// program was unloaded) or "shutdown" (the agent stopped).
	Reason string `json:"reason,omitempty"`
}

// MissRatio is misses / (misses + runs) over the episode.
func (e *Episode) MissRatio() float64 {
	if e.Misses+e.Runs == 0 {
		return 0
	}
	return float64(e.Misses) / float64(e.Misses+e.Runs)
}

// StatsState says whether the kernel accrues run_time_ns / run_cnt, and why.
type StatsState struct {
	// Enabled is true while the kernel counts run time: the agent holds a
	// BPF_ENABLE_STATS fd or kernel.bpf_stats_enabled is 1.
	Enabled bool `json:"enabled"`
	// HeldByAgent is true when this agent holds a BPF_ENABLE_STATS fd.
	HeldByAgent bool `json:"held_by_agent"`
	// Sysctl is the value of kernel.bpf_stats_enabled; it counts every
	// holder, this agent included, so a value above what the agent holds
	// means someone else enabled stats too. -1 when unreadable.
	Sysctl int `json:"sysctl"`
	// Error says why the agent could not enable stats, if it could not.
	Error string `json:"error,omitempty"`
	// Mode is the agent's --stats mode: always, sampled or off; empty when
	// the agent leaves stats alone (one-shot list).
	Mode StatsMode `json:"mode"`
	// Window and Period are the sampled mode's: stats on for Window of
	// each Period; run counts and run time are scaled from the windows.
	Window time.Duration `json:"window_ns,omitempty"`
	Period time.Duration `json:"period_ns,omitempty"`
	// HeldElsewhere is true when the last look found stats on while this
	// agent held no fd (another tool's BPF_ENABLE_STATS fd, or the
	// sysctl): the tax is not this agent's, and in sampled mode the
	// intervals such a holder spans count exactly (Counts).
	HeldElsewhere bool `json:"held_elsewhere,omitempty"`
	// Counts says what the interval's run counts and run times are:
	// CountsExact (the kernel counted every run: stats on throughout, by
	// the agent's fd or another holder's) or CountsSampled (scaled from
	// the stats windows, in whole or in part). Empty when the agent does
	// not count runs (off mode, stats refused, one-shot list).
	Counts string `json:"counts,omitempty"`
}

// What an interval's run counts are (StatsState.Counts).
const (
	CountsExact   = "exact"
	CountsSampled = "sampled"
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

// ScanStats is the agent's account of its own work in one scan.
type ScanStats struct {
	Duration time.Duration `json:"duration_ns"`
	Programs int           `json:"programs"`
	Links    int           `json:"links"`
	// Vanished counts objects that came or went under the scan: freed
	// between GET_NEXT_ID and GET_FD_BY_ID (ENOENT), or a link still being
	// created or torn down (EAGAIN, after one retry). A normal race, not an
	// error.
	Vanished int `json:"vanished"`
	// Errors counts objects that could not be read for another reason.
	Errors    int      `json:"errors"`
	ErrorMsgs []string `json:"error_messages,omitempty"`
	// OwnersRefreshed is true when this scan re-read /proc for owners.
	OwnersRefreshed bool `json:"owners_refreshed"`
	// Source is where programs and counters were read from: "iterator"
	// (one iter/bpf_prog read, no per-program syscall) or "syscall".
	Source string `json:"source"`
	// FallbackReason says why a node that could use the iterator does
	// not (kernel refusal, lockdown, --no-iterator); empty otherwise.
	FallbackReason string `json:"fallback_reason,omitempty"`
	// IteratorPin is the bpffs pin of a running agent's iterator that a
	// one-shot list read instead of loading its own; empty otherwise.
	IteratorPin string `json:"iterator_pin,omitempty"`
	// OwnersPin is the bpffs pin of a running agent's task_file iterator
	// that a one-shot list found owners with instead of walking /proc.
	OwnersPin string `json:"owners_pin,omitempty"`
	// LinksSource is where links (and kprobe link missed) were read
	// from: "iterator" (one iter/bpf_link read; a link it cannot read is
	// read by syscall) or "syscall".
	LinksSource string `json:"links_source"`
	// LinksFallbackReason says why links are read by syscall.
	LinksFallbackReason string `json:"links_fallback_reason,omitempty"`
	// Walk is true when this scan walked every program (an iterator pass
	// or the syscall path); false when, no program having been loaded or
	// unloaded since the last walk, the counters came from one stats
	// table read (agent/scan_steady.go).
	Walk bool `json:"walk"`
	// WalkReason says why a scan walked: the first read, programs loaded
	// or unloaded, records lost, or why this node has no steady read.
	WalkReason string `json:"walk_reason,omitempty"`
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
}
