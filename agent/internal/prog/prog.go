// Package prog owns what the agent knows of one BPF program: Program as a
// scan read it (identity, cumulative counters, links, owners, iterator
// facts), ProgramStat (a program with its interval's Rates) and the
// arithmetic from two reads' Counters to an interval's Rates. The agent
// re-exports these types (agent.Program, agent.Link, ...): consumers name
// them there.
package prog

import (
	"time"

	"github.com/bpfleet/bpfleet/agent/owners"
)

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
	// kernel: recursion, contention-possible, unknown or none (see docs/misses.md).
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
	// MissedNesting and MissedMaxactive are Missed's two parts, which
	// add up to it: runs the kprobe skipped because another kprobe was
	// running on that CPU (the kprobe's nmissed), and returns a kretprobe
	// could not catch because all its maxactive instances were in use
	// (the kretprobe's nmissed; 0 for a kprobe). Only the bpf_link
	// iterator reads them, from the kernel's structs: the syscall path
	// (BPF_OBJ_GET_INFO_BY_FD) gives only the sum, so they are nil there,
	// and nil too for a kprobe_multi return probe, whose one counter
	// mixes both.
	MissedNesting   *uint64 `json:"missed_nesting"`
	MissedMaxactive *uint64 `json:"missed_maxactive"`
	// Pod is what the target says about the pod it belongs to, for the
	// attribution to name the pod's workload; nil for most links (a
	// pointer: every scan copies every link).
	Pod *TargetPod `json:"-"`
}

// Reasons of a kprobe link miss: why the kernel's link info missed grew. A
// closed set: series keyed by reason never multiply.
const (
	// LinkMissNesting: the kprobe hit while another kprobe was running on
	// that CPU (a probe, or a BPF program run from one, reaching a
	// probed function) and was skipped: the kprobe's nmissed.
	LinkMissNesting = "nesting"
	// LinkMissMaxactive: a kretprobe entry found all of its maxactive
	// instances in use (that many calls already in flight, typically
	// sleeping) and its return went unseen: the kretprobe's nmissed.
	LinkMissMaxactive = "maxactive"
	// LinkMissUnknown: misses whose reason the agent cannot tell: read by
	// syscall (the sum only), or a kprobe_multi return probe, whose one
	// counter mixes both.
	LinkMissUnknown = "unknown"
)

// LinkMissReasons lists the reasons, in the order documents show them.
var LinkMissReasons = [...]string{LinkMissNesting, LinkMissMaxactive, LinkMissUnknown}

// LinkMisses is a count of kprobe link misses by reason; the parts add up
// to the misses they split.
type LinkMisses struct {
	Nesting   uint64 `json:"nesting"`
	Maxactive uint64 `json:"maxactive"`
	Unknown   uint64 `json:"unknown"`
}

// Add adds b to m.
func (m *LinkMisses) Add(b LinkMisses) {
	m.Nesting += b.Nesting
	m.Maxactive += b.Maxactive
	m.Unknown += b.Unknown
}

// Sum is the misses the parts split.
func (m LinkMisses) Sum() uint64 { return m.Nesting + m.Maxactive + m.Unknown }

// Get returns one reason's count (0 for a name not in LinkMissReasons).
func (m LinkMisses) Get(reason string) uint64 {
	switch reason {
	case LinkMissNesting:
		return m.Nesting
	case LinkMissMaxactive:
		return m.Maxactive
	case LinkMissUnknown:
		return m.Unknown
	}
	return 0
}

// SplitLinkMissed splits a growth of missed by the growths of its two
// parts, nil where the split is unknown at either end; what the parts do
// not explain is unknown, so the result always adds up to missed. The
// parts are clamped to missed: a link whose split appeared or vanished
// between two reads (an iterator read after a syscall read) must not
// count more than the kernel's own sum grew.
func SplitLinkMissed(missed uint64, nesting, maxactive *uint64) LinkMisses {
	if nesting == nil || maxactive == nil {
		return LinkMisses{Unknown: missed}
	}
	n := min(*nesting, missed)
	m := min(*maxactive, missed-n)
	return LinkMisses{Nesting: n, Maxactive: m, Unknown: missed - n - m}
}

// LinkMissedOf is a link's cumulative missed by reason; ok is false for a
// link without missed.
func LinkMissedOf(l *Link) (LinkMisses, bool) {
	if l.Missed == nil {
		return LinkMisses{}, false
	}
	return SplitLinkMissed(*l.Missed, l.MissedNesting, l.MissedMaxactive), true
}

// TargetPod is what a cgroup or interface target says about its pod: the
// pod UID in a cgroup's path, or for an interface whose other end is in
// another network namespace (a CNI's host end) the interface and that
// namespace's id (plus one: 0 is none).
type TargetPod struct {
	UID       string
	Kind      string // the interface's driver
	Ifindex   int
	PeerNetns int64
}

// Rates are one interval's deltas of a program's (or an aggregate's)
// cumulative counters and the rates derived from them.
type Rates struct {
	Runs      uint64 `json:"runs"`
	RunTimeNs uint64 `json:"run_time_ns"`
	Misses    uint64 `json:"misses"`
	// LinkMissed is the delta of the links' kprobe missed counters.
	LinkMissed uint64 `json:"link_missed"`
	// LinkMissedBy is LinkMissed by reason, adding up to it: unknown
	// where a link's split is not known (Link.MissedNesting).
	LinkMissedBy LinkMisses `json:"link_missed_by"`
	RunsPerSec   float64    `json:"runs_per_sec"`
	NsPerRun     float64    `json:"ns_per_run"`
	CPUShare     float64    `json:"cpu_share"` // fraction of one CPU, 1.0 = one whole CPU
	MissesPerSec float64    `json:"misses_per_sec"`
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
	// MissCauses is the program's recursion_misses by cause, cumulative
	// since the agent first saw it (what it had missed before is
	// unexplained): the causes add up to RecursionMisses exactly. Nil
	// where the kernel has no recursion_misses.
	MissCauses *MissCauses `json:"miss_causes,omitempty"`
	// DeltaCauses is this interval's Delta.Misses by cause.
	DeltaCauses MissCauses `json:"delta_causes"`
}

// ProfileStat is what the fentry/fexit profiler (probes/profiler) measured
// of one selected program: every run's duration, with global stats off.
type ProfileStat struct {
	// Error is one line when the program cannot be profiled (no BTF, or
	// the kernel refuses tracing BPF programs); the rest is then empty.
	Error string `json:"error,omitempty"`
	// Func is the BTF function the profiler is attached to.
	Func string `json:"func,omitempty"`
	// Shape is how: "fsession" (one program) or "fentry/fexit" (a pair,
	// on kernels without fsession or refusing it on a BPF program).
	Shape string `json:"shape,omitempty"`
	// Timing is "every run", or "windows W of P" where runs are timed only
	// inside windows (Config.ProfileWindow): Runs stay exact, Buckets,
	// SumNs, MaxNs and the percentiles then describe the TimedRuns.
	Timing    string `json:"timing,omitempty"`
	TimedRuns uint64 `json:"timed_runs"`
	// Cumulative since the profiler attached: Buckets[b] counts runs of
	// [2^b, 2^(b+1)) ns (bucket 0 also 0 ns).
	Buckets []uint64 `json:"buckets,omitempty"`
	Runs    uint64   `json:"runs"`
	SumNs   uint64   `json:"sum_ns"`
	MaxNs   uint64   `json:"max_ns"`
	// Over the last interval (since the previous scan): runs and
	// percentiles from the interval's histogram, within a factor of 2 (a
	// log2 bucket, interpolated inside it).
	IntervalRuns uint64  `json:"interval_runs"`
	P50Ns        float64 `json:"p50_ns"`
	P90Ns        float64 `json:"p90_ns"`
	P99Ns        float64 `json:"p99_ns"`
	MeanNs       float64 `json:"mean_ns"`
}

// Owner is owners.Owner, the one owner type, named here beside Program
// for the packages that alias prog's types (agent, agent/internal/reader).
type Owner = owners.Owner

// SameValue says whether two optional values are both absent or equal.
func SameValue[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || *a == *b
}
