package agent

import (
	"sort"
	"time"
)

// MaxEpisodeIntervals bounds the intervals an episode keeps, so a program
// that misses forever cannot grow the agent's memory.
const MaxEpisodeIntervals = 64

// MaxEpisodeTop bounds an episode's tasks and stacks (the most frequent).
const MaxEpisodeTop = 5

// MaxMissSamples bounds the misses one snapshot carries (Snapshot.Misses).
const MaxMissSamples = 256

type episodeKey struct {
	source string
	prog   uint32
	link   uint32
}

// missObservation is one scan's misses for one episode key.
type missObservation struct {
	key    episodeKey
	misses uint64
	runs   uint64
	prog   *Program
	kind   string
	// linkBy is a link_missed observation's misses by reason.
	linkBy LinkMisses
}

type episodeState struct {
	ep    Episode
	quiet int
}

// episodeTracker is the miss-episode state machine: an episode opens at the
// first interval with new misses, grows while misses keep coming, and closes
// after `quiet` consecutive intervals without any, when its program
// vanishes, or at shutdown. It is pure: time and observations come in.
type episodeTracker struct {
	quiet int
	open  map[episodeKey]*episodeState
}

func newEpisodeTracker(quiet int) *episodeTracker {
	if quiet < 1 {
		quiet = 1
	}
	return &episodeTracker{quiet: quiet, open: map[episodeKey]*episodeState{}}
}

// observe feeds one scan ending at now after an interval dt. obs holds the
// keys with misses in this interval; present says whether a key's program
// (or link) still exists. It returns the episodes open after the scan and
// those that closed in it, both sorted by start then program id.
func (t *episodeTracker) observe(now time.Time, dt time.Duration, obs []missObservation, present func(episodeKey) bool) []Episode {
	var out []Episode
	hit := make(map[episodeKey]bool, len(obs))
	for _, o := range obs {
		if o.misses == 0 {
			continue
		}
		hit[o.key] = true
		rate := 0.0
		if dt > 0 {
			rate = float64(o.misses) / dt.Seconds()
		}
		st := t.open[o.key]
		if st == nil {
			st = &episodeState{ep: newEpisode(o, now.Add(-dt))}
			t.open[o.key] = st
		}
		e := &st.ep
		st.quiet = 0
		e.End = now
		e.Misses += o.misses
		e.LinkMissedBy.Add(o.linkBy)
		e.Runs += o.runs
		if rate > e.PeakRate {
			e.PeakRate = rate
		}
		if len(e.Intervals) == MaxEpisodeIntervals {
			copy(e.Intervals, e.Intervals[1:])
			e.Intervals = e.Intervals[:MaxEpisodeIntervals-1]
			e.Truncated++
		}
		e.Intervals = append(e.Intervals, EpisodeInterval{Time: now, Misses: o.misses, Runs: o.runs, Rate: rate})
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

func newEpisode(o missObservation, start time.Time) Episode {
	e := Episode{Source: o.key.source, ProgID: o.key.prog, LinkID: o.key.link, Kind: o.kind, Start: start, Open: true}
	if p := o.prog; p != nil {
		e.ProgName, e.ProgTag, e.ProgType = p.Name, p.Tag, p.Type
		e.AttachType, e.AttachTarget, e.Sleepable = p.AttachType, p.AttachTarget, p.Sleepable
	}
	return e
}

func (t *episodeTracker) close(k episodeKey, reason string) Episode {
	e := t.open[k].ep
	delete(t.open, k)
	e.Open = false
	e.Reason = reason
	return e
}

// closeAll ends every open episode (at shutdown).
func (t *episodeTracker) closeAll(reason string) []Episode {
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
