package exporter

import (
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// workloadGrace is how long a workload key whose programs all unloaded
// keeps being exported: a pod restart or an
// upgrade reloads its programs within it, and the series then goes on
// from where it was instead of restarting.
const workloadGrace = 15 * time.Minute

// workloadKey is what stays the same when a program is reloaded or its
// pod restarted: the program's name (less a suffix made per instance),
// type and attachment (the target's class: its pod's workload, QoS class,
// driver and name prefix, not the cgroup or interface itself), and who
// owns it by workload (a pod's namespace and controller), not by instance
// (pod, pid, container). METRICS.md states the rule (stableDoc).
type workloadKey struct {
	name, typ, attachType, target, missKind string
	namespace, kind, workload, exe          string
}

func workloadKeyOf(p *agent.Program) workloadKey {
	g := groupOf(p)
	k := workloadKey{
		name: stableName(p.Name), typ: p.Type, attachType: p.AttachType, target: p.AttachTarget, missKind: p.MissKind,
		namespace: g.namespace, kind: g.kind, workload: g.workload, exe: g.exe,
	}
	if p.TargetClass != "" {
		k.target = p.TargetClass
	}
	return k
}

// exeName is the executable's base name, else the command name. A binary
// replaced while it runs (an upgrade) reads "<path> (deleted)": the same
// executable.
func exeName(comm, exe string) string {
	if exe != "" {
		return strings.TrimSuffix(filepath.Base(exe), " (deleted)")
	}
	return comm
}

// stableName is a program's name with a suffix made per instance as "*": 5
// or more hex digits, a digit among them, after the last '_', '-' or '.'
// (a loader that loads one copy per pod, container or interface and names
// it <name>_<id>). The kernel keeps 15 characters of a name, so a shorter
// number is more likely a name's own (flt_0001).
func stableName(name string) string {
	// From the end, without strings.LastIndexAny: its rune decoding was a
	// twentieth of a busy Update.
	i, digit := len(name), false
	for ; i > 0; i-- {
		c := name[i-1]
		if c >= '0' && c <= '9' {
			digit = true
		} else if (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			break
		}
	}
	if len(name)-i < 5 || !digit || i == 0 {
		return name
	}
	if c := name[i-1]; c != '_' && c != '-' && c != '.' {
		return name
	}
	return name[:i] + "*"
}

func (k workloadKey) kvs(kv []attribute.KeyValue) []attribute.KeyValue {
	add := func(name, v string) {
		if v != "" {
			kv = append(kv, attribute.String(name, v))
		}
	}
	kv = append(kv,
		attribute.String(attrProgramName, k.name),
		attribute.String(attrProgramType, k.typ),
		attribute.String(attrAttachType, k.attachType),
	)
	add(attrAttachTarget, k.target)
	add(attrMissKind, k.missKind)
	add(attrK8sNamespaceName, k.namespace)
	add(attrK8sWorkloadKind, k.kind)
	add(attrK8sWorkloadName, k.workload)
	add(attrProcessExecutableName, k.exe)
	return kv
}

// workloadSeries is one key's counters: the sum, over every program seen
// under the key, of what the program counted while the exporter ran. A
// program loaded since the exporter started adds its whole counter (it
// counted from zero when it loaded, maybe before the agent first saw it),
// a known one its growth since the previous scan, an unloaded one nothing
// more. So the sum never goes down, whatever reloads.
type workloadSeries struct {
	key   workloadKey
	attrs attribute.Set
	// seq numbers the keys in the order they appeared: the cap's last
	// sort key, so ties keep their order from scan to scan. (Encoding
	// the attribute set in every comparison of every scan's sort was half
	// of the agent's CPU at 1,000 keys.)
	seq       uint64
	kv        []attribute.KeyValue
	acc       accumulator
	hasMisses bool
	hasLinks  bool // some program had a kprobe link with a missed count
	// linkSets are attrs with each bpf.link.miss.reason (in
	// agent.LinkMissReasons' order), made the first time the key is
	// exported with link misses.
	linkSets []attribute.Set
	// causes: attrs with each cause of acc.causes (causes.go).
	causes causeSets
	loaded int
	// start is when the series began counting: the exporter's start for
	// programs loaded before it, else the earliest load time of its
	// programs.
	start    time.Time
	lastSeen time.Time
	// mem is what the key's loaded programs hold this scan (memory.go);
	// memSets are attrs with each bpf.memory.kind (program, map), made
	// the first time the key is exported with its memory.
	mem     keyMemory
	memSets [2]attribute.Set
}

// programLast is what a program had counted at the previous scan, and
// its key's series: a program whose key is unchanged (nearly all, every
// scan) finds it without hashing the key's nine strings.
type programLast struct {
	runs, runTimeNs, misses, linkMissed uint64
	linkBy                              agent.LinkMisses
	causes                              agent.MissCauses
	key                                 workloadKey
	w                                   *workloadSeries
	gen                                 uint64 // the Update that saw it last
	// entry is the snapshot entry read last. Entries are immutable and an
	// unchanged program keeps its entry from scan to scan, so the same
	// entry again means nothing to add: no key to build, no growth.
	entry *agent.ProgramStat
	info  attribute.Set // its bpf.program.info set, with --program-info
}

// growth is cur-prev of a cumulative counter; a counter that went down
// (it cannot for one program id, but ids are reused after a long time)
// counts as new.
func growth(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// linkMissed is the sum of p's links' missed, by reason too; ok is false
// for a program without a link with missed.
func linkMissed(p *agent.Program) (uint64, agent.LinkMisses, bool) {
	var n uint64
	var by agent.LinkMisses
	ok := false
	for i := range p.Links {
		if m, has := agent.LinkMissedOf(&p.Links[i]); has {
			n += *p.Links[i].Missed
			by.Add(m)
			ok = true
		}
	}
	return n, by, ok
}

// linkGrowth splits the growth of a program's link missed (d) by the
// growths of its reasons, clamped so that the parts add up to d.
func linkGrowth(d uint64, cur, last agent.LinkMisses) agent.LinkMisses {
	n, m := growth(cur.Nesting, last.Nesting), growth(cur.Maxactive, last.Maxactive)
	return agent.SplitLinkMissed(d, &n, &m)
}

// linkReasonSets returns w's attribute sets with each link miss reason.
func (w *workloadSeries) linkReasonSets() []attribute.Set {
	if w.linkSets == nil {
		w.linkSets = make([]attribute.Set, len(agent.LinkMissReasons))
		for i, r := range agent.LinkMissReasons {
			kv := append(append(make([]attribute.KeyValue, 0, len(w.kv)+1), w.kv...), attribute.String(attrLinkMissReason, r))
			w.linkSets[i] = attribute.NewSet(kv...)
		}
	}
	return w.linkSets
}

// buildWorkloads updates the workload accumulators from s and fills v.
// Called with e.mu held.
func (e *Exporter) buildWorkloads(s *agent.Snapshot, v *view, now time.Time) {
	for _, w := range e.byRank {
		w.loaded = 0
		w.mem = keyMemory{mapIDs: w.mem.mapIDs[:0]}
	}
	e.gen++
	e.keysMoved = len(s.Programs) != e.progsLast
	e.progsLast = len(s.Programs)
	for i, entry := range s.Programs {
		prev := e.progLast[entry.ID]
		if prev != nil && prev.entry == entry {
			// Idle since the last scan (most programs, most scans): its
			// key, counters and info set are the last scan's.
			prev.w.loaded++
			prev.w.mem.add(&entry.Program)
			prev.w.lastSeen = now
			prev.gen = e.gen
			if e.cfg.ProgramInfo {
				v.info = append(v.info, prev.info)
			}
			continue
		}
		p := &s.Programs[i].Program
		k := workloadKeyOf(p)
		var w *workloadSeries
		if prev != nil && prev.key == k {
			w = prev.w
		} else {
			// New, or under another key: the keys' memory moved.
			e.keysMoved = true
			w = e.workloads[k]
		}
		if w == nil {
			kv := k.kvs(make([]attribute.KeyValue, 0, 9))
			e.keySeq++
			w = &workloadSeries{key: k, kv: kv, attrs: attribute.NewSet(kv...), seq: e.keySeq}
			e.workloads[k] = w
			e.byRank = append(e.byRank, w)
		}
		misses := uint64(0)
		var causes agent.MissCauses
		if p.RecursionMisses != nil {
			misses = *p.RecursionMisses
			causes = agent.ProgramCauses(entry)
			w.hasMisses = true
		}
		lm, lby, ok := linkMissed(p)
		w.hasLinks = w.hasLinks || ok
		cur := programLast{runs: p.RunCount, runTimeNs: p.RunTimeNs, misses: misses, causes: causes, linkMissed: lm, linkBy: lby, key: k, w: w, gen: e.gen, entry: entry}
		var last programLast
		if prev == nil {
			from := p.LoadTime
			if p.LoadTime.IsZero() || p.LoadTime.Before(e.started) {
				// Loaded before the exporter started: what it counted
				// before is history, not this series'. The series count
				// from the exporter's start, so an agent restart starts
				// them afresh (a counter reset, from zero) instead of
				// adding the history of every loaded program again as one
				// false spike.
				last, from = cur, e.started
			} else {
				// Loaded since: it counted from zero at its load time,
				// maybe before the agent first saw it; all of it is the
				// key's.
				last = programLast{}
			}
			// The series must start no later than what it counts, or a
			// backend that writes a zero at the start time would put it
			// after the counts.
			if w.start.IsZero() || from.Before(w.start) {
				w.start = from
			}
		} else if last = *prev; w.start.IsZero() {
			// A known program under a new key (its pod was named once the
			// pod cache synced): the key counts its growth from now on,
			// and from the exporter's start as far as the backend knows.
			// Never later: a start that moves forward reads as a reset.
			w.start = e.started
		}
		w.acc.runs += growth(cur.runs, last.runs)
		w.acc.runTimeNs += growth(cur.runTimeNs, last.runTimeNs)
		w.acc.misses += growth(cur.misses, last.misses)
		w.acc.causes.Plus(causeGrowth(cur.causes, last.causes))
		if w.hasMisses {
			w.causes.ensure(&w.acc.causes, w.kv)
		}
		d := growth(cur.linkMissed, last.linkMissed)
		w.acc.linkMissed += d
		w.acc.linkBy.Add(linkGrowth(d, cur.linkBy, last.linkBy))
		w.loaded++
		w.mem.add(p)
		w.lastSeen = now
		if prev == nil {
			prev = &programLast{}
			e.progLast[p.ID] = prev
		}
		*prev = cur
		if e.cfg.ProgramInfo {
			kv := appendOwnerIDs(append(make([]attribute.KeyValue, 0, 14), attribute.Int64(attrProgramID, int64(p.ID)), attribute.String(attrProgramTag, p.Tag)), p)
			kv = append(kv, w.kv...)
			prev.info = attribute.NewSet(kv...)
			v.info = append(v.info, prev.info)
		}
	}
	// Every program of s has its entry now: with no more entries than
	// programs, none is stale (most scans), and the map is not walked.
	if len(e.progLast) > len(s.Programs) {
		for id, l := range e.progLast {
			if l.gen != e.gen {
				delete(e.progLast, id)
			}
		}
	}
	live := e.byRank[:0]
	for _, w := range e.byRank {
		if w.loaded == 0 && now.Sub(w.lastSeen) > workloadGrace {
			delete(e.workloads, w.key)
			continue
		}
		live = append(live, w)
	}
	clear(e.byRank[len(live):])
	e.byRank = live
	// Over the cap, keep the keys that missed, then the most expensive, in
	// an order that rarely changes (so the exported set does not churn).
	// Under it every key is exported and the order does not matter: no
	// sort (it was a third of the per-scan work at 1,000 keys). The series
	// are sorted, not their keys: a key of nine strings costs a map hash
	// in every comparison. byRank keeps the order, so a scan that changed
	// few series sorts a nearly sorted list (pdqsort's best case).
	if max := e.cfg.MaxPrograms; max > 0 && len(e.byRank) > max {
		ws := e.byRank
		sort.Slice(ws, func(a, b int) bool {
			wa, wb := ws[a], ws[b]
			if ma, mb := wa.acc.misses+wa.acc.linkMissed > 0, wb.acc.misses+wb.acc.linkMissed > 0; ma != mb {
				return ma
			}
			if wa.acc.runTimeNs != wb.acc.runTimeNs {
				return wa.acc.runTimeNs > wb.acc.runTimeNs
			}
			return wa.seq < wb.seq
		})
		for _, w := range ws[max:] {
			v.dropped += w.loaded
		}
		live = ws[:max]
	}
	// The series themselves, not copies (1,000 keys were 144 KB of
	// garbage every scan): Produce reads them with e.mu held. The slice is
	// the view's own: the next Update reorders byRank.
	v.workloads = append(make([]*workloadSeries, 0, len(live)), live...)
}
