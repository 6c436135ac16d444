package agent

import (
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// linkMissedState is a link's missed at the last scan, by reason.
type linkMissedState struct {
	missed uint64
	by     LinkMisses
	split  bool // the reader knew the split
}

// linkMisses moves the kprobe link missed counters from old's links to
// e's (nil: the program is new, or gone), adding an observation for each
// link whose counter grew since the last scan, with its growth by reason.
func (a *Agent) linkMisses(obs []misses.Observation, old, e *ProgramStat) []misses.Observation {
	if old != nil {
		for _, l := range old.Links {
			if l.Missed != nil && (e == nil || !hasLink(e.Links, l.ID)) {
				delete(a.prevLink, l.ID)
			}
		}
	}
	if e == nil {
		return obs
	}
	if a.prevLink == nil {
		a.prevLink = map[uint32]linkMissedState{}
	}
	for i := range e.Links {
		l := &e.Links[i]
		by, ok := prog.LinkMissedOf(l)
		if !ok {
			continue
		}
		prev, ok := a.prevLink[l.ID]
		split := l.MissedNesting != nil && l.MissedMaxactive != nil
		a.prevLink[l.ID] = linkMissedState{missed: *l.Missed, by: by, split: split}
		if m := prog.Sub(*l.Missed, prev.missed); ok && m > 0 {
			// The reasons' growths where both reads knew the split
			// (else the whole growth is unknown), clamped to the sum's.
			var n, x *uint64
			if split && prev.split {
				dn, dx := prog.Sub(by.Nesting, prev.by.Nesting), prog.Sub(by.Maxactive, prev.by.Maxactive)
				n, x = &dn, &dx
			}
			obs = append(obs, misses.Observation{Key: misses.Key{Source: SourceLinkMissed, Prog: e.ID, Link: l.ID}, Misses: m, Runs: e.Delta.Runs, Prog: &e.Program, Kind: e.MissKind, LinkBy: prog.SplitLinkMissed(m, n, x)})
		}
	}
	return obs
}
