package agent

import "github.com/bpfleet/bpfleet/agent/internal/prog"

// linkMisses moves the kprobe link missed counters from old's links to
// e's (nil: the program is new, or gone), adding an observation for each
// link whose counter grew since the last scan.
func (a *Agent) linkMisses(obs []missObservation, old, e *ProgramStat) []missObservation {
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
		a.prevLink = map[uint32]uint64{}
	}
	for _, l := range e.Links {
		if l.Missed == nil {
			continue
		}
		prev, ok := a.prevLink[l.ID]
		a.prevLink[l.ID] = *l.Missed
		if m := prog.Sub(*l.Missed, prev); ok && m > 0 {
			obs = append(obs, missObservation{key: episodeKey{SourceLinkMissed, e.ID, l.ID}, misses: m, runs: e.Delta.Runs, prog: &e.Program, kind: e.MissKind})
		}
	}
	return obs
}
