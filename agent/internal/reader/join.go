package reader

import (
	"sort"
	"strings"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// The join: each program's links, iterator facts and what they make of its
// attach type and target, after both were read (scan.go).

// join attaches links and iterator facts to programs and derives each
// program's attach type, target and sleepable flag. statics, when not nil,
// are the programs' cached parts in progs' order (the iterator path);
// otherwise they are looked up by id.
func (r *Reader) join(progs View, links []Link, statics []*progStatic, metas []progMeta) {
	// Programs come in ascending id order (both sources read in id
	// order): then each program's links are one run of the links sorted
	// by program id, found by a merge, without a map.
	ascending := true
	n := progs.Len()
	for i := 1; i < n && ascending; i++ {
		ascending = progs.At(i-1).ID < progs.At(i).ID
	}
	var byProg map[uint32][]Link
	sorted := make([]Link, len(links)) // this scan's own: snapshots share it, nothing else writes it
	copy(sorted, links)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].ProgID != sorted[b].ProgID {
			return sorted[a].ProgID < sorted[b].ProgID
		}
		return sorted[a].ID < sorted[b].ID
	})
	if !ascending {
		byProg = make(map[uint32][]Link, len(links))
		for i := range sorted {
			byProg[sorted[i].ProgID] = append(byProg[sorted[i].ProgID], sorted[i])
		}
	}
	k := 0
	sleepable := make([]bool, n) // one allocation for every flag of the scan
	for i := range n {
		p := progs.At(i)
		var s *progMeta
		var f ProgFacts
		var haveFacts bool
		switch {
		case metas != nil:
			s = &metas[i]
			f, haveFacts = s.facts, s.haveFacts
		case statics != nil:
			s = &statics[i].progMeta
			f, haveFacts = s.facts, s.haveFacts
		default:
			if ps := r.progs[p.ID]; ps != nil {
				s = &ps.progMeta
			}
			f, haveFacts = r.facts[p.ID]
		}
		if haveFacts && f.SleepableKnown {
			sleepable[i] = f.Sleepable
			p.Sleepable = &sleepable[i]
		}
		if ascending {
			for k < len(sorted) && sorted[k].ProgID < p.ID {
				k++
			}
			e := k
			for e < len(sorted) && sorted[e].ProgID == p.ID {
				e++
			}
			p.Links, k = sorted[k:e:e], e
		} else {
			p.Links = byProg[p.ID]
		}
		p.Owners = []Owner{} // JSON readers get [] rather than null
		if len(p.Links) == 0 {
			p.Links = []Link{}
			continue
		}
		for j := range p.Links {
			l := &p.Links[j]
			switch {
			case l.Type == "perf_event" && l.AttachType == "perf_event" && s.progTypeID != progTypePerfEvent:
				// Kernels before 6.6 give no perf_event link details: the
				// program type is all there is (a kprobe-type program may
				// also be a kretprobe or uprobe; the kernel does not say).
				l.AttachType = ProgTypeName(s.progTypeID)
			case l.Type == "raw_tracepoint" && s.progTypeID == progTypeTracing:
				l.AttachType = tracingAttachName(attachTraceRawTP, p.Sleepable)
			case l.Type == "tracing":
				if haveFacts {
					l.AttachType = tracingAttachName(f.ExpectedAttachType, p.Sleepable)
				} else if l.AttachType != "" && p.Sleepable == nil {
					// Without the iterator a sleepable program cannot be
					// told from a plain one; say so rather than guess.
					l.AttachType += "?"
				}
				if l.Target == "" {
					l.Target = f.AttachFunc
				}
				if l.Target == "" {
					l.Target = r.btf.name(s.attachBTFObjID, s.attachBTFID)
				}
			}
		}
		p.AttachType = p.Links[0].AttachType
		p.AttachTarget = joinTargets(p.Links)
		p.TargetClass = JoinClasses(p.Links)
	}
}

// Rejoin joins a scan whose joins were kept (JoinsKept) again, from its
// slots' statics and its links: for an owner refresh, whose answers replace
// what the kept joins carry.
func (r *Reader) Rejoin(progs View) {
	if !r.joinsKept {
		return
	}
	for i := range r.order {
		resetJoins(progs.At(i), &r.order[i].prog)
	}
	r.join(progs, r.lastLinks, r.order, nil)
	r.joinsKept = false
}

// sameLinkList says whether two scans read the same links: same ids for the
// same programs, same counters (a link's other fields are cached by id).
func sameLinkList(a, b []Link) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].ProgID != b[i].ProgID || !prog.SameValue(a[i].Missed, b[i].Missed) ||
			!prog.SameValue(a[i].MissedNesting, b[i].MissedNesting) || !prog.SameValue(a[i].MissedMaxactive, b[i].MissedMaxactive) {
			return false
		}
	}
	return true
}

// joinTargets names up to three distinct targets of a program's links.
func joinTargets(links []Link) string {
	if len(links) == 1 {
		return links[0].Target // nothing to join: no allocation
	}
	ts := make([]string, len(links))
	for i, l := range links {
		ts[i] = l.Target
	}
	return JoinStrings(ts)
}

// JoinStrings joins up to three distinct non-empty strings.
func JoinStrings(ss []string) string {
	var out []string
	for _, s := range ss {
		if s == "" || contains(out, s) {
			continue
		}
		if len(out) == 3 {
			out = append(out, "…")
			break
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
