package agent

import (
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/owners"
)

// ownerStablePeriod is the owner refresh period while every owner process
// is watched: what it still catches (a program's fd passed to a new
// process while its owner lives on, a new pin) is rare, and a refresh
// walks every process's fds (make bench BENCH=agentcpu).
const ownerStablePeriod = 5 * time.Minute

// ownerRefreshDue says whether owners are re-read now whatever programs
// the scan finds: the period passed, or a watched owner process exited.
func (a *Agent) ownerRefreshDue(now time.Time) bool {
	period := a.cfg.OwnerRefresh
	if a.ownerSlow && a.attr.ownersStable() && !now.Before(a.ownerFastUntil) {
		period = max(period, ownerStablePeriod)
	}
	if now.Sub(a.ownersAt) >= period {
		return true
	}
	if a.attr.ownerExited() {
		a.ownerFastUntil = now.Add(2 * time.Minute)
		return true
	}
	return false
}

// earlyHolders are holders being read beside the programs, but for the
// agent's own (attribution.walkOthers). A program with an id above horizon
// (the highest of the previous scan) may have been loaded after that walk
// began, so it counts as not yet attributed and the next scan walks again.
type earlyHolders struct {
	c       chan holders
	horizon uint32
}

// attachOwners joins owners, pins and attachments to programs, re-reading
// them only when a program appeared that has not been attributed yet or
// the refresh period passed (then early delivers the holders): walking
// every process's fds is the most expensive part of a scan.
func (a *Agent) attachOwners(progs reader.View, now time.Time, st *ScanStats, early *earlyHolders) bool {
	if a.attr == nil {
		return false
	}
	refresh := early != nil
	n := progs.Len()
	a.attr.beginApply()
	// The same programs as the last scan, all attributed then: none to
	// look up.
	if !a.r.JoinsKept() || !a.ownerAllKnown {
		for i := range n {
			if !a.ownerKnown[progs.At(i).ID] {
				refresh = true
				break
			}
		}
	}
	a.ownerAllKnown = !refresh
	if refresh {
		// apply expects each program as join left it: kept joins carry
		// the last refresh's owners and attachments.
		a.r.Rejoin(progs)
		horizon := ^uint32(0)
		var h holders
		if early != nil {
			h, horizon = <-early.c, early.horizon
			// The read has returned, its fds closed: what the agent
			// holds now is its own.
			a.attr.finishHolders(&h)
			// A program above the horizon that the walk found no holder
			// for may have been loaded after the walk passed its loader:
			// exported ownerless now and owned a scan later, its series
			// would change key. The agent walks again (every program read
			// existed before this walk began); a one-shot list prints once.
			if !a.cfg.OneShot && unheldAbove(progs, h.res, horizon) {
				a.attr.noteRefusals(h.res)
				h, horizon = a.attr.readHolders(), ^uint32(0)
			}
		} else {
			h = a.attr.readHolders()
		}
		for _, err := range a.attr.refresh(progs, h) {
			st.Errors++
			st.AddError(err)
		}
		a.ownersAt = now
		clear(a.ownerKnown)
		a.ownerAllKnown = true
		for i := range n {
			if id := progs.At(i).ID; id <= horizon {
				a.ownerKnown[id] = true
			} else {
				a.ownerAllKnown = false
			}
		}
	}
	if refresh || !a.r.JoinsKept() {
		// Kept joins carry the last scan's owners, read from the same
		// answers.
		for i := range n {
			a.attr.apply(progs.At(i))
		}
	}
	if refresh {
		a.attr.dropGoneNetdevs()
	}
	return refresh
}

// unheldAbove says whether a program with an id above horizon has no
// holder in res.
func unheldAbove(progs reader.View, res *owners.Result, horizon uint32) bool {
	for i := progs.Len() - 1; i >= 0; i-- {
		p := progs.At(i)
		if p.ID <= horizon {
			return false // read in id order
		}
		if res == nil || len(res.Programs[p.ID]) == 0 {
			return true
		}
	}
	return false
}
