package agent

import (
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"slices"
	"sort"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/stats"
)

// assemble turns one read's programs into snap's programs, episodes and
// aggregates (snap's Time, Interval and Stats set). It is the pure half of
// Scan: nothing here reads the kernel.
//
// A program whose counters, joins and owners are what they were and whose
// interval was idle (zero delta) keeps the entry the previous snapshot
// handed out: snapshots share it, and nothing ever writes an entry once it
// is handed out (the API's history keeps old snapshots). Only a program that
// changed gets a new entry, and the aggregates (attach types, owners, stats
// tax) are updated by the changed entries alone (aggregates.go): on a node
// whose programs are mostly idle a scan costs the Go side little more than a
// comparison per program.
//
// joinsKept says each program's joins, owners and miss kind are what they
// were in the last scan (reader.joinsKept): then a program whose counters
// did not move is known unchanged without comparing it.
func (a *Agent) assemble(snap *Snapshot, progs reader.View, dt time.Duration, smp *stats.Sampler, joinsKept bool) {
	now := snap.Time
	n := progs.Len()
	a.statesFromEntries()
	// A one-shot read's first scan keeps no states: the agent scans once
	// (Config.OneShot). Should it scan again, its entries are the states.
	lazy := progs.Stats != nil && len(a.prevIDs) == 0
	fast := joinsKept && smp == nil
	// The same programs in the same order as the last scan (the reader
	// kept every slot, the last scan's were in id order): their states are
	// updated where they stand, and while no entry changes the last
	// snapshot's list of entries is handed out again.
	// (Not with profiles: their entries are copied on write, which needs
	// the last scan's states as they were.)
	inPlace := fast && a.prof == nil && a.lastInOrder && len(a.prevIDs) == n && len(a.lastEntries) == n && sameIDs(a.prevIDs, progs)
	var entries []*ProgramStat
	if !inPlace {
		entries = make([]*ProgramStat, n)
	}
	// Counters and entries of the previous scan, by ascending id as
	// programs come (both sources read in id order): each program's
	// previous counters are found by a merge, and this scan's are kept in
	// the spare buffers.
	before := idCursor{ids: a.prevIDs}
	nextIDs, nextS := a.spareIDs[:0], a.spareS[:0]
	switch {
	case inPlace:
		nextIDs, nextS = a.prevIDs, a.prevS
	case !lazy && cap(nextIDs) < n: // sized once rather than grown by appends
		nextIDs, nextS = make([]uint32, 0, n), make([]progState, 0, n)
	}
	g := &a.agg
	g.begin()
	var obs []misses.Observation
	matched := 0
	for i := range n {
		p := progs.At(i)
		cur := prog.CountersOf(p)
		var prevC prog.Counters
		var old *ProgramStat
		j, havePrev := i, true
		if !inPlace {
			j, havePrev = before.find(p.ID)
		}
		if havePrev {
			ps := &a.prevS[j]
			prevC, old = ps.c, ps.e
			matched++
			// Decided from the state alone: the entries are all over
			// the heap, the states side by side.
			if fast && cur == prevC && ps.quiet && ps.hasMisses == (p.RecursionMisses != nil) {
				if !inPlace {
					nextIDs, nextS = append(nextIDs, p.ID), append(nextS, *ps)
				}
				if entries != nil {
					entries[i] = old // idle and unchanged
				}
				continue
			}
		}
		raw := prog.ProgramDelta(cur, prevC, havePrev, p.LoadTime, a.prevTime)
		if smp != nil {
			raw = smp.Program(p, raw, dt)
		}
		d := raw // an idle program's rates are all zero: no divisions
		moved := raw != (Rates{})
		if moved {
			d = prog.WithRates(raw, dt)
		}
		p.MissKind = missKind(p, &a.kernel)
		var e *ProgramStat
		switch {
		case old != nil && !moved && idle(old) && sameDynamic(p, &old.Program):
			e = old // idle and unchanged: shared with the previous snapshot
		case progs.Stats != nil:
			e = &progs.Stats[i] // a one-shot scan built it in place
		default:
			e = newEntry(p)
		}
		var explained []MissSample
		if e != old {
			e.Delta, e.New = d, !havePrev
			explained = a.missCauses(e, old, d.Misses)
		}
		// idle(e), known without reading it: a kept entry is idle, a new
		// one has this delta, New unless seen before, and no profile yet.
		st := progState{c: cur, e: e, quiet: !moved && havePrev, hasMisses: p.RecursionMisses != nil}
		switch {
		case inPlace:
			nextS[i] = st
		case !lazy:
			nextIDs, nextS = append(nextIDs, p.ID), append(nextS, st)
		}
		if entries == nil {
			// The first change of an in-place scan: the entries before
			// it are the last snapshot's.
			entries = make([]*ProgramStat, n)
			copy(entries, a.lastEntries[:i])
		}
		entries[i] = e
		if e == old {
			continue
		}
		g.replace(old, e)
		if d.Misses > 0 {
			obs = append(obs, misses.Observation{Key: misses.Key{Source: SourceRecursionMisses, Prog: p.ID, Link: 0}, Misses: d.Misses, Runs: d.Runs, Prog: &e.Program, Kind: e.MissKind,
				Causes: e.DeltaCauses, Samples: explained})
		}
		if len(e.Links) > 0 || old != nil && len(old.Links) > 0 {
			obs = a.linkMisses(obs, old, e)
		}
	}
	if entries == nil {
		entries = a.lastEntries // nothing changed, nothing moved
	}
	if !inPlace {
		a.lastInOrder = slices.IsSorted(nextIDs)
		sortByID(nextIDs, nextS)
	}
	next := idCursor{ids: nextIDs}
	if matched < len(a.prevIDs) {
		// Programs gone since the last scan leave the aggregates.
		for j, id := range a.prevIDs {
			if old := a.prevS[j].e; !next.has(id) {
				g.replace(old, nil)
				a.linkMisses(nil, old, nil)
			}
		}
	}
	present := func(k misses.Key) bool { return next.has(k.Prog) }
	if smp != nil {
		smp.End(next.has)
	}
	snap.Episodes = a.eps.Observe(now, dt, obs, present)

	if a.prof != nil {
		// A profiled program's entry is written: copied first when it is
		// the previous snapshot's.
		a.prof.update(entries, func(i int) *ProgramStat {
			e := entries[i]
			if j, ok := before.find(e.ID); ok && a.prevS[j].e == e {
				c := *e
				entries[i] = &c
				if k, ok := next.find(e.ID); ok {
					nextS[k].e = &c
				}
				g.replace(e, &c)
				e = &c
			}
			return e
		})
		snap.Degraded = append(snap.Degraded, a.prof.errors()...)
		for i := range nextS { // profiles were set after the states
			nextS[i].quiet = idle(nextS[i].e)
		}
	}
	snap.Programs = entries
	snap.AttachTypes = g.attachTypes(dt, a.overhead())
	snap.Owners = g.owners(entries, dt)
	snap.Calibration = append([]Calibration(nil), a.calibration...)
	snap.StatsCosts = append([]StatsCost(nil), a.statsCosts...)
	snap.StatsTax = g.tax(entries, a.statsCosts, snap.Stats, dt, now)
	a.lastEntries = entries
	if lazy {
		a.pendingStates = entries
	}
	if !inPlace {
		a.prevIDs, a.prevS, a.spareIDs, a.spareS = nextIDs, nextS, a.prevIDs, a.prevS
		clear(a.spareS) // the spare buffer must not keep old entries alive
	}
}

// statesFromEntries makes the states of a one-shot scan (pendingStates),
// which keeps none, before a later scan needs them.
func (a *Agent) statesFromEntries() {
	es := a.pendingStates
	if es == nil {
		return
	}
	a.pendingStates = nil
	a.prevIDs, a.prevS = make([]uint32, len(es)), make([]progState, len(es))
	for i, e := range es {
		a.prevIDs[i] = e.ID
		a.prevS[i] = progState{c: prog.CountersOf(&e.Program), e: e, quiet: idle(e), hasMisses: e.RecursionMisses != nil}
	}
	a.lastInOrder = slices.IsSorted(a.prevIDs)
	sortByID(a.prevIDs, a.prevS)
}

// sameIDs says whether progs has exactly ids, in that order.
func sameIDs(ids []uint32, progs reader.View) bool {
	for i, id := range ids {
		if progs.At(i).ID != id {
			return false
		}
	}
	return true
}

// idle says whether an entry can be handed out again as it is for a
// program still idle: its own interval was idle too, it is not its
// program's first, and no profile is attached.
func idle(e *ProgramStat) bool {
	return e.Delta == (Rates{}) && !e.New && e.Profile == nil
}

// entryBox is a snapshot entry with the values it points to. The reader's
// values are per scan (a slice of every program's misses, of sleepable
// flags, of links): an entry that outlives its scan, handed out again by
// later snapshots, would keep the whole scan's slice alive, so it has its
// own copies, in one allocation.
type entryBox struct {
	ps        ProgramStat
	misses    uint64
	sleepable bool
}

// newEntry is a new entry for p, pointing into nothing of the scan's.
func newEntry(p *Program) *ProgramStat {
	b := &entryBox{}
	b.ps.Program = *p
	if p.RecursionMisses != nil {
		b.misses = *p.RecursionMisses
		b.ps.RecursionMisses = &b.misses
	}
	if p.Sleepable != nil {
		b.sleepable = *p.Sleepable
		b.ps.Sleepable = &b.sleepable
	}
	if len(p.Links) > 0 {
		b.ps.Links = ownLinks(p.Links)
	}
	return &b.ps
}

// ownLinks copies links and their missed counters.
func ownLinks(ls []Link) []Link {
	out := slices.Clone(ls)
	var missed []uint64
	for i := range out {
		for _, p := range []**uint64{&out[i].Missed, &out[i].MissedNesting, &out[i].MissedMaxactive} {
			if *p == nil {
				continue
			}
			if missed == nil {
				missed = make([]uint64, 0, 3*(len(out)-i)) // the sum and its parts: pointers never move
			}
			missed = append(missed, **p)
			*p = &missed[len(missed)-1]
		}
	}
	return out
}

// sameDynamic says whether p and o, two reads of the same program, agree
// on everything a scan sets (the fields resetDynamic resets): counters,
// joins, owners, pins. The static fields are one cached read's for an id.
// nil and empty Links or Owners differ: JSON shows null for one, [] for
// the other.
func sameDynamic(p, o *Program) bool {
	return p.RunCount == o.RunCount && p.RunTimeNs == o.RunTimeNs && prog.SameValue(p.RecursionMisses, o.RecursionMisses) &&
		p.AttachType == o.AttachType && p.AttachTarget == o.AttachTarget && p.TargetClass == o.TargetClass && p.MissKind == o.MissKind &&
		prog.SameValue(p.Sleepable, o.Sleepable) && sameLinks(p.Links, o.Links) &&
		(p.Owners == nil) == (o.Owners == nil) && slices.Equal(p.Owners, o.Owners) &&
		(p.Pins == nil) == (o.Pins == nil) && slices.Equal(p.Pins, o.Pins)
}

func sameLinks(a, b []Link) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.ID != y.ID || x.ProgID != y.ProgID || x.Type != y.Type || x.AttachType != y.AttachType ||
			x.Target != y.Target || x.TargetClass != y.TargetClass || !prog.SameValue(x.Missed, y.Missed) ||
			!prog.SameValue(x.MissedNesting, y.MissedNesting) || !prog.SameValue(x.MissedMaxactive, y.MissedMaxactive) {
			return false
		}
	}
	return true
}

func hasLink(ls []Link, id uint32) bool {
	for i := range ls {
		if ls[i].ID == id {
			return true
		}
	}
	return false
}

// idCursor finds ids in an ascending list: in O(1) each when they are
// looked up in ascending order (a merge), by binary search otherwise.
type idCursor struct {
	ids []uint32
	j   int
}

// find returns id's index and whether it is there.
func (c *idCursor) find(id uint32) (int, bool) {
	if c.j > 0 && c.j <= len(c.ids) && c.ids[c.j-1] >= id {
		c.j, _ = slices.BinarySearch(c.ids, id) // out of order: search
	}
	for c.j < len(c.ids) && c.ids[c.j] < id {
		c.j++
	}
	return c.j, c.j < len(c.ids) && c.ids[c.j] == id
}

// has says whether id is in the list, in any order of lookups.
func (c *idCursor) has(id uint32) bool {
	_, ok := slices.BinarySearch(c.ids, id)
	return ok
}

// progState is what a scan keeps of each program for the next one.
type progState struct {
	c prog.Counters
	e *ProgramStat // the entry handed out
	// quiet says e can be handed out again as it is (idle), hasMisses
	// that it has recursion misses: the next scan decides from these
	// without touching e.
	quiet, hasMisses bool
}

// sortByID sorts ids ascending with sts alongside, when they are not
// already (programs normally come in id order).
func sortByID(ids []uint32, sts []progState) {
	if slices.IsSorted(ids) {
		return
	}
	idx := make([]int, len(ids))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ids[idx[a]] < ids[idx[b]] })
	ids2, sts2 := slices.Clone(ids), slices.Clone(sts)
	for i, k := range idx {
		ids[i], sts[i] = ids2[k], sts2[k]
	}
}

// missCauses sets a changed entry's miss causes: the interval's misses
// split by the watcher's samples (all unexplained without it), and the
// cumulative causes carried from the program's last entry, so that they
// add up to the kernel's recursion_misses. MissCauses stays nil while
// nothing was ever explained (consumers read that as all unexplained). It
// returns the samples that explained the interval.
func (a *Agent) missCauses(e, old *ProgramStat, misses uint64) []MissSample {
	var prevCum *MissCauses
	if old != nil {
		prevCum = old.MissCauses
	}
	e.MissCauses, e.DeltaCauses = prevCum, MissCauses{}
	if misses == 0 {
		return nil
	}
	var samples []MissSample
	if a.mw != nil {
		e.DeltaCauses, samples = a.mw.explain(e.ID, misses)
	} else {
		e.DeltaCauses.Unexplained = misses
	}
	if prevCum == nil && e.DeltaCauses.Unexplained == misses {
		return samples // still nothing explained
	}
	var c MissCauses
	if prevCum != nil {
		c = *prevCum
	}
	c.Plus(e.DeltaCauses)
	if e.RecursionMisses != nil {
		// What the agent did not see (before it started, or before the
		// program's first explained miss) is unexplained.
		c = FitCauses(c, *e.RecursionMisses)
	}
	e.MissCauses = &c
	return samples
}
