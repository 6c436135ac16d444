package misses

import (
	"sort"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// MaxEpisodeIntervals bounds the intervals an episode keeps, so a program
// that misses forever cannot grow the agent's memory.
const MaxEpisodeIntervals = 64

// MaxEpisodeTop bounds an episode's tasks and stacks (the most frequent).
const MaxEpisodeTop = 5

// MaxMissSamples bounds the misses one snapshot carries (Snapshot.Misses).
const MaxMissSamples = 256

// Key names an episode: its source, program and (link_missed) link.
type Key struct {
	Source string
	Prog   uint32
	Link   uint32
}

// Observation is one scan's misses for one episode key.
type Observation struct {
	Key    Key
	Misses uint64
	Runs   uint64
	Prog   *prog.Program
	Kind   string
	// Causes split misses by cause; Samples are the misses the watcher
	// sampled in the interval (recursion_misses only).
	Causes  prog.MissCauses
	Samples []MissSample
	// LinkBy is a link_missed observation's misses by reason.
	LinkBy prog.LinkMisses
}

type episodeState struct {
	ep    Episode
	quiet int
	// tasks and stacks count the episode's samples by task and by
	// distinct stack (bounded: maxEpisodeKeys each; Episode.Tasks and
	// Stacks are their top MaxEpisodeTop).
	tasks  map[int]*EpisodeTask
	stacks map[string]*EpisodeStack
}

// maxEpisodeKeys bounds the distinct tasks and stacks an episode counts:
// past it, samples of new ones still count in Causes and Contexts only.
const maxEpisodeKeys = 64

// addSamples counts an interval's samples into the episode.
func (st *episodeState) addSamples(samples []MissSample) {
	if len(samples) == 0 {
		return
	}
	e := &st.ep
	if e.Contexts == nil {
		e.Contexts = map[string]uint64{}
		st.tasks = map[int]*EpisodeTask{}
		st.stacks = map[string]*EpisodeStack{}
	}
	for i := range samples {
		s := &samples[i]
		e.Contexts[s.Context]++
		if t := st.tasks[s.TID]; t != nil {
			t.Misses++
		} else if len(st.tasks) < maxEpisodeKeys {
			st.tasks[s.TID] = &EpisodeTask{PID: s.PID, Comm: s.Comm, ContainerID: s.ContainerID, PodName: s.PodName, PodNamespace: s.PodNamespace, Misses: 1}
		}
		key := s.Cause + "\x00" + s.Context + "\x00" + strings.Join(stackKey(s.Stack), "\n")
		if k := st.stacks[key]; k != nil {
			k.Misses++
		} else if len(st.stacks) < maxEpisodeKeys {
			st.stacks[key] = &EpisodeStack{Cause: s.Cause, Context: s.Context, Stack: s.Stack, Misses: 1}
		}
	}
	e.Tasks = make([]EpisodeTask, 0, len(st.tasks)) // new: snapshots hold the old
	for _, t := range st.tasks {
		e.Tasks = append(e.Tasks, *t)
	}
	sort.Slice(e.Tasks, func(i, j int) bool {
		a, b := e.Tasks[i], e.Tasks[j]
		return a.Misses > b.Misses || a.Misses == b.Misses && a.PID < b.PID
	})
	e.Tasks = e.Tasks[:min(len(e.Tasks), MaxEpisodeTop)]
	e.Stacks = make([]EpisodeStack, 0, len(st.stacks))
	for _, k := range st.stacks {
		e.Stacks = append(e.Stacks, *k)
	}
	sort.Slice(e.Stacks, func(i, j int) bool {
		a, b := e.Stacks[i], e.Stacks[j]
		return a.Misses > b.Misses || a.Misses == b.Misses && strings.Join(a.Stack, ",") < strings.Join(b.Stack, ",")
	})
	e.Stacks = e.Stacks[:min(len(e.Stacks), MaxEpisodeTop)]
}

// stackKey is a stack without the offsets into the functions that vary
// from one run of the same path to the next (none do in the kernel's text,
// but a JIT program reloaded has new addresses): frames by symbol.
func stackKey(stack []string) []string {
	out := make([]string, len(stack))
	for i, f := range stack {
		if j := strings.IndexByte(f, '+'); j > 0 && !strings.HasPrefix(f, "0x") {
			f = f[:j]
		}
		out[i] = f
	}
	return out
}

// Tracker is the miss-episode state machine: an episode opens at the
// first interval with new misses, grows while misses keep coming, and closes
// after `quiet` consecutive intervals without any, when its program
// vanishes, or at shutdown. It is pure: time and observations come in.
type Tracker struct {
	quiet int
	open  map[Key]*episodeState
}

func NewTracker(quiet int) *Tracker {
	if quiet < 1 {
		quiet = 1
	}
	return &Tracker{quiet: quiet, open: map[Key]*episodeState{}}
}

// Observe feeds one scan ending at now after an interval dt. obs holds the
// keys with misses in this interval; present says whether a key's program
// (or link) still exists. It returns the episodes open after the scan and
// those that closed in it, both sorted by start then program id.
func (t *Tracker) Observe(now time.Time, dt time.Duration, obs []Observation, present func(Key) bool) []Episode {
	var out []Episode
	hit := make(map[Key]bool, len(obs))
	for _, o := range obs {
		if o.Misses == 0 {
			continue
		}
		hit[o.Key] = true
		rate := 0.0
		if dt > 0 {
			rate = float64(o.Misses) / dt.Seconds()
		}
		st := t.open[o.Key]
		if st == nil {
			st = &episodeState{ep: newEpisode(o, now.Add(-dt))}
			t.open[o.Key] = st
		}
		e := &st.ep
		st.quiet = 0
		e.End = now
		e.Misses += o.Misses
		e.LinkMissedBy.Add(o.LinkBy)
		e.Runs += o.Runs
		if o.Key.Source == SourceRecursionMisses {
			e.Causes.Plus(o.Causes)
		} else {
			e.Causes.Unexplained += o.Misses // a kprobe's own missed: no watchpoint sees it
		}
		st.addSamples(o.Samples)
		if rate > e.PeakRate {
			e.PeakRate = rate
		}
		if len(e.Intervals) == MaxEpisodeIntervals {
			copy(e.Intervals, e.Intervals[1:])
			e.Intervals = e.Intervals[:MaxEpisodeIntervals-1]
			e.Truncated++
		}
		e.Intervals = append(e.Intervals, EpisodeInterval{Time: now, Misses: o.Misses, Runs: o.Runs, Rate: rate})
	}
	for k, st := range t.open {
		if hit[k] {
			continue
		}
		switch {
		case !present(k):
			out = append(out, t.close(k, "vanished"))
		default:
			st.quiet++
			if st.quiet >= t.quiet {
				out = append(out, t.close(k, "quiet"))
			}
		}
	}
	for _, st := range t.open {
		out = append(out, cloneEpisode(st.ep))
	}
	sortEpisodes(out)
	return out
}

func newEpisode(o Observation, start time.Time) Episode {
	e := Episode{Source: o.Key.Source, ProgID: o.Key.Prog, LinkID: o.Key.Link, Kind: o.Kind, Start: start, Open: true}
	if p := o.Prog; p != nil {
		e.ProgName, e.ProgTag, e.ProgType = p.Name, p.Tag, p.Type
		e.AttachType, e.AttachTarget, e.Sleepable = p.AttachType, p.AttachTarget, p.Sleepable
	}
	return e
}

func (t *Tracker) close(k Key, reason string) Episode {
	e := t.open[k].ep
	delete(t.open, k)
	e.Open = false
	e.Reason = reason
	return e
}

// CloseAll ends every open episode (at shutdown).
func (t *Tracker) CloseAll(reason string) []Episode {
	var out []Episode
	for k := range t.open {
		out = append(out, t.close(k, reason))
	}
	sortEpisodes(out)
	return out
}

// cloneEpisode copies the interval slice so a snapshot never shares memory
// with the tracker's live state.
func cloneEpisode(e Episode) Episode {
	e.Intervals = append([]EpisodeInterval(nil), e.Intervals...)
	if e.Contexts != nil {
		c := make(map[string]uint64, len(e.Contexts))
		for k, v := range e.Contexts {
			c[k] = v
		}
		e.Contexts = c
	}
	return e
}

func sortEpisodes(es []Episode) {
	sort.Slice(es, func(a, b int) bool {
		if !es[a].Start.Equal(es[b].Start) {
			return es[a].Start.Before(es[b].Start)
		}
		if es[a].ProgID != es[b].ProgID {
			return es[a].ProgID < es[b].ProgID
		}
		return es[a].LinkID < es[b].LinkID
	})
}
