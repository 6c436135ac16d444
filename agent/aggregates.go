package agent

import (
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/agent/internal/stats"
)

// aggregates keeps a snapshot's sums over programs — per attach type, per
// owner, the stats tax's per-type part — from one scan to the next, and
// changes them by the programs whose entries changed (replace), so that a
// scan of mostly idle programs does not sum every program again. Each
// result equals the from-scratch one (aggregateAttachTypes,
// aggregateOwners, stats.ComputeTax over every entry: TestAggregatesIncremental),
// float sums included: the changed entries are added in program order, and
// an unchanged entry's delta is zero, which adds nothing.
type aggregates struct {
	types map[string]*typeSum
	// names are the attach types with programs, sorted, with their sums;
	// nil when a type came or went.
	names []string
	sums  []*typeSum
	// moved are the new entries whose delta is not zero, in program
	// order: the only ones that add to this scan's deltas and rates.
	moved []*ProgramStat
	// ownedChanged are the changes in which an entry has owners; owned
	// counts the current entries with owners.
	ownedChanged []entryChange
	owned        int
	// last is the attach type of the last typeAdd: programs of one type
	// often come in a row.
	last *typeSum
	// ownersDirty: an owner list changed, or a program with owners came
	// or went: owners are summed again from every program.
	ownersDirty bool
	own         *ownerSums // nil: not summed yet
	// lastOwners is the last result, handed out again while no owned
	// program changes and it was idle (every delta zero).
	lastOwners     []OwnerStat
	lastOwnersIdle bool
	// shapeDirty: a program came, went or changed attach type: the tax's
	// per-type programs and sources are counted again.
	shapeDirty bool
	shape      *stats.TaxShape
}

// entryChange is a program's entry changing from old (nil: the program
// is new) to e (nil: it is gone).
type entryChange struct{ old, e *ProgramStat }

// typeSum is the cumulative counters of one attach type's programs.
type typeSum struct {
	name                      string
	programs                  int
	runs, runTime, linkMissed uint64
	misses                    missSum
	slot                      int // index in this scan's result
}

// missSum is an aggregate's recursion_misses: the sum over its programs
// that have the counter, and how many do, so that the sum turns absent
// again when the last of them goes rather than staying a 0 the kernel
// never gave.
type missSum struct {
	sum   uint64
	known int
}

// add adds (or takes away) a program's recursion_misses, nil where the
// kernel has none.
func (m *missSum) add(v *uint64, add bool) {
	switch {
	case v == nil:
	case add:
		m.sum += *v
		m.known++
	default:
		m.sum -= *v
		m.known--
	}
}

// value is the aggregate's recursion_misses, stored in *dst (a result's
// own memory: the sums go on changing); nil where no program has them.
func (m missSum) value(dst *uint64) *uint64 {
	if m.known == 0 {
		return nil
	}
	*dst = m.sum
	return dst
}

// begin starts a scan.
func (g *aggregates) begin() {
	// No entry kept alive by the buffers.
	clear(g.moved)
	clear(g.ownedChanged)
	g.moved, g.ownedChanged = g.moved[:0], g.ownedChanged[:0]
	if g.types == nil {
		g.types = make(map[string]*typeSum)
	}
}

// replace accounts for a program whose entry changed from old to e: old
// nil for a program seen first, e nil for one gone.
func (g *aggregates) replace(old, e *ProgramStat) {
	var oldOwners, newOwners []Owner
	if old != nil {
		g.typeAdd(old, false)
		oldOwners = old.Owners
	}
	if e != nil {
		g.typeAdd(e, true)
		newOwners = e.Owners
		if e.Delta != (Rates{}) {
			g.moved = append(g.moved, e)
		}
	}
	if old == nil || e == nil || old.AttachType != e.AttachType || old.Type != e.Type {
		g.shapeDirty = true
	}
	if len(oldOwners) > 0 || len(newOwners) > 0 {
		g.ownedChanged = append(g.ownedChanged, entryChange{old, e})
		g.owned += min(len(newOwners), 1) - min(len(oldOwners), 1)
		if !slices.Equal(oldOwners, newOwners) {
			g.ownersDirty = true
		}
	}
}

func (g *aggregates) typeAdd(e *ProgramStat, add bool) {
	t := g.last
	if t == nil || t.name != e.AttachType {
		t = g.types[e.AttachType]
	}
	if t == nil {
		t = &typeSum{name: e.AttachType}
		g.types[e.AttachType] = t
		g.names = nil
	}
	g.last = t
	c := prog.CountersOf(&e.Program)
	if add {
		t.programs++
		t.runs += e.RunCount
		t.runTime += e.RunTimeNs
		t.misses.add(e.RecursionMisses, true)
		t.linkMissed += c.LinkMissed
		return
	}
	// Sums of unsigned counters: what was added is taken away exactly,
	// wrapping or not.
	t.programs--
	t.runs -= e.RunCount
	t.runTime -= e.RunTimeNs
	t.misses.add(e.RecursionMisses, false)
	t.linkMissed -= c.LinkMissed
	if t.programs == 0 {
		delete(g.types, e.AttachType)
		g.names = nil
		g.last = nil
	}
}

// attachTypes is aggregateAttachTypes over every entry.
func (g *aggregates) attachTypes(dt time.Duration, overhead map[string]*float64) []AttachTypeStat {
	if len(g.types) == 0 {
		return nil
	}
	if g.names == nil {
		g.names = make([]string, 0, len(g.types))
		for name := range g.types {
			g.names = append(g.names, name)
		}
		sort.Strings(g.names)
		g.sums = g.sums[:0]
		for _, name := range g.names {
			g.sums = append(g.sums, g.types[name])
		}
	}
	out := make([]AttachTypeStat, len(g.sums))
	misses := make([]uint64, len(g.sums))
	for i, t := range g.sums {
		t.slot = i
		out[i] = AttachTypeStat{AttachType: t.name, Programs: t.programs, RunCount: t.runs, RunTimeNs: t.runTime,
			RecursionMisses: t.misses.value(&misses[i]), LinkMissed: t.linkMissed, OverheadNs: overhead[t.name]}
	}
	for _, e := range g.moved {
		prog.AddRates(&out[g.types[e.AttachType].slot].Delta, e.Delta)
	}
	for i := range out {
		out[i].Delta = prog.WithRates(out[i].Delta, dt)
	}
	return out
}

// owners is aggregateOwners over entries.
func (g *aggregates) owners(entries []*ProgramStat, dt time.Duration) []OwnerStat {
	if g.owned == 0 { // no program has an owner: nothing to sum
		g.own, g.ownersDirty, g.lastOwners, g.lastOwnersIdle = nil, false, nil, true
		return nil
	}
	if len(g.ownedChanged) == 0 && g.own != nil && !g.ownersDirty && g.lastOwnersIdle {
		return g.lastOwners
	}
	if g.ownersDirty || g.own == nil {
		g.own = sumOwners(entries)
		g.ownersDirty = false
	} else {
		for _, c := range g.ownedChanged {
			// Owner lists are the same (else ownersDirty), neither is
			// nil (a program came or went): only the counters moved.
			if c.old != nil && c.e != nil {
				g.own.add(c.old, false)
				g.own.add(c.e, true)
			}
		}
	}
	var deltas []*ProgramStat
	for _, e := range g.moved {
		if len(e.Owners) > 0 {
			deltas = append(deltas, e)
		}
	}
	g.lastOwners = g.own.result(deltas, dt)
	g.lastOwnersIdle = len(deltas) == 0
	return g.lastOwners
}

// ownerSums is the per-owner sums of cumulative counters, in the order
// owners are first seen (by program, then owner), deltas left zero;
// misses[j] is out[j]'s recursion_misses.
type ownerSums struct {
	out    []OwnerStat
	misses []missSum
	idx    map[string]int
}

// sumOwners sums every program's counters into each of its owners: the
// first half of aggregateOwners.
func sumOwners(progs []*ProgramStat) *ownerSums {
	s := &ownerSums{idx: map[string]int{}}
	var keys []string
	for _, p := range progs {
		keys = ownerKeys(keys[:0], p.Owners)
		for k, key := range keys {
			if key == "" {
				continue // the program counts once per owner
			}
			j, ok := s.idx[key]
			if !ok {
				o := &p.Owners[k]
				j = len(s.out)
				s.idx[key] = j
				st := OwnerStat{Key: key, ContainerID: o.ContainerID, PodUID: o.PodUID, PodName: o.PodName, Namespace: o.PodNamespace}
				if o.ContainerID == "" {
					st.PID, st.Comm = o.PID, o.Comm
				}
				s.out = append(s.out, st)
				s.misses = append(s.misses, missSum{})
			}
			s.out[j].ProgramIDs = append(s.out[j].ProgramIDs, p.ID)
		}
		s.add(p, true)
	}
	return s
}

// ownerKeys appends each distinct owner key of owners to dst; a key is ""
// where an earlier owner of the same program has it, so that dst[k] is
// owners[k]'s.
func ownerKeys(dst []string, owners []Owner) []string {
	for k := range owners {
		key := ownerKey(&owners[k])
		if slices.Contains(dst, key) {
			key = ""
		}
		dst = append(dst, key)
	}
	return dst
}

// add adds (or takes away) p's counters to each of its owners.
func (s *ownerSums) add(p *ProgramStat, add bool) {
	var buf [4]string
	for _, key := range ownerKeys(buf[:0], p.Owners) {
		j, ok := s.idx[key]
		if key == "" || !ok {
			continue
		}
		o := &s.out[j]
		s.misses[j].add(p.RecursionMisses, add)
		if add {
			o.RunCount += p.RunCount
			o.RunTimeNs += p.RunTimeNs
		} else {
			o.RunCount -= p.RunCount
			o.RunTimeNs -= p.RunTimeNs
		}
	}
}

// result is the owners with the deltas of progs (every program whose
// delta is not zero, in program order), sorted as aggregateOwners sorts.
func (s *ownerSums) result(progs []*ProgramStat, dt time.Duration) []OwnerStat {
	if len(s.out) == 0 {
		return nil
	}
	out := slices.Clone(s.out) // ProgramIDs shared: never appended to once summed
	misses := make([]uint64, len(out))
	for j := range out {
		out[j].RecursionMisses = s.misses[j].value(&misses[j])
	}
	var buf [4]string
	for _, p := range progs {
		for _, key := range ownerKeys(buf[:0], p.Owners) {
			if j, ok := s.idx[key]; key != "" && ok {
				prog.AddRates(&out[j].Delta, p.Delta)
			}
		}
	}
	for i := range out {
		out[i].Delta = prog.WithRates(out[i].Delta, dt)
	}
	sort.Slice(out, func(a, b int) bool {
		return out[a].Delta.RunTimeNs > out[b].Delta.RunTimeNs || (out[a].Delta.RunTimeNs == out[b].Delta.RunTimeNs && out[a].Key < out[b].Key)
	})
	return out
}

// tax is stats.ComputeTax over entries. The per-type programs and sources are
// kept while no program comes, goes or changes attach type and the costs
// are the same; the rates are summed over the changed entries only (an
// unchanged entry's rate is zero).
func (g *aggregates) tax(entries []*ProgramStat, costs []StatsCost, st StatsState, dt time.Duration, now time.Time) StatsTax {
	if dt <= 0 {
		return stats.ComputeTax(entries, costs, st, dt, now) // rates since load: every program has one
	}
	sh := g.shape
	if sh == nil || !sh.SameCosts(costs) {
		sh = stats.NewTaxShape(costs)
		g.shapeDirty = true
	}
	tax, done := sh.Head(st, dt)
	if done {
		g.shape = sh
		return tax
	}
	if g.shapeDirty {
		sh.Count(entries)
		g.shapeDirty = false
	}
	g.shape = sh
	sh.Rates(&tax, g.moved)
	return tax
}

// ownerKey groups by container when the owner is in one, else by process.
func ownerKey(o *Owner) string {
	if o.ContainerID != "" {
		return o.ContainerID
	}
	return "pid:" + strconv.Itoa(o.PID)
}
