package misses

import (
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

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
	// Waiting are named programs and programs with an open miss episode
	// that wait for a slot.
	Waiting []uint32 `json:"waiting,omitempty"`
	// Blind are programs whose misses tripped no watchpoint while watched
	// (the kernel counts them where watchpoints do not fire: kprobes on
	// arm64): no longer watched, their misses unexplained.
	Blind []BlindProgram `json:"blind,omitempty"`
	// Samples and OverBudget are cumulative: misses sampled, and
	// watchpoint hits the budget turned off (counted, not sampled).
	Samples    uint64 `json:"samples"`
	OverBudget uint64 `json:"over_budget"`
	// Late counts samples drained after the interval they belong to was
	// counted (its counts had the miss unexplained): dropped, so that no
	// miss is both shown with a cause and counted unexplained.
	Late uint64 `json:"late,omitempty"`
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
	ProgID   uint32 `json:"prog_id"`
	ProgName string `json:"prog_name"`
	// Since is when it was armed; Why, why it holds its slot: "named"
	// (on the command line), "missing" (its episode is open) or
	// "missed-before" (it keeps its slot until a program with newer
	// misses needs it).
	Since   time.Time `json:"since"`
	Why     string    `json:"why"`
	Samples uint64    `json:"samples"`
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
	Causes prog.MissCauses `json:"causes"`
	// LinkMissedBy is a link_missed episode's Misses by reason (adding
	// up to Misses); zero for a recursion_misses episode.
	LinkMissedBy prog.LinkMisses   `json:"link_missed_by"`
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
