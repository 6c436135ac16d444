package exporter

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// Misses by cause (METRICS.md, "Why a program missed"): every recursion
// miss counter carries bpf.miss.cause, one of agent.Causes. A series emits
// its unexplained count always — the whole count where nothing was
// explained, so a node without the miss watcher keeps exactly the series
// it had — and another cause's only once it is non-zero (then for good:
// the counts are cumulative). The causes add up to the kernel's counter.

// unexplainedIdx is agent.CauseUnexplained's index in agent.Causes.
var unexplainedIdx = func() int {
	for i, c := range agent.Causes {
		if c == agent.CauseUnexplained {
			return i
		}
	}
	panic("no unexplained cause")
}()

// causeSets are a series' attribute set with each cause, made when the
// cause first counts.
type causeSets [len(agent.Causes)]attribute.Set

// emitted says whether the series of cause i goes out with n misses.
func emitted(i int, n uint64) bool { return n > 0 || i == unexplainedIdx }

// ensure makes the sets c's emitted causes need, from the series' own
// attributes kv.
func (s *causeSets) ensure(c *agent.MissCauses, kv []attribute.KeyValue) {
	for i, cause := range agent.Causes {
		if s[i].Len() == 0 && emitted(i, c.Get(cause)) {
			s[i] = attribute.NewSet(append(append(make([]attribute.KeyValue, 0, len(kv)+1), kv...), attribute.String(attrMissCause, cause))...)
		}
	}
}

// causeGrowth is cur-last by cause, for an accumulated series: the
// explained causes' growth, and unexplained the rest of the total's, so
// that the growths add up to the counter's growth whatever moved between
// causes.
func causeGrowth(cur, last agent.MissCauses) agent.MissCauses {
	g := agent.MissCauses{
		Recursion: growth(cur.Recursion, last.Recursion),
		Interrupt: growth(cur.Interrupt, last.Interrupt),
		Preempted: growth(cur.Preempted, last.Preempted),
		Nested:    growth(cur.Nested, last.Nested),
	}
	return agent.FitCauses(g, growth(cur.Sum(), last.Sum()))
}

// intervalCauses are the explained causes of a snapshot's interval summed
// per attach type and per owner key: the aggregates' Delta.Misses fitted
// to them give the aggregates' causes. Empty (no map made) in the usual
// snapshot, where nothing was explained.
type intervalCauses struct {
	byAttach map[string]agent.MissCauses
	byProg   map[uint32]agent.MissCauses
}

func newIntervalCauses(s *agent.Snapshot) intervalCauses {
	var ic intervalCauses
	for _, p := range s.Programs {
		if !agent.Explained(p.DeltaCauses) {
			continue
		}
		if ic.byAttach == nil {
			ic.byAttach, ic.byProg = map[string]agent.MissCauses{}, map[uint32]agent.MissCauses{}
		}
		c := agent.IntervalCauses(p)
		c.Unexplained = 0
		a := ic.byAttach[p.AttachType]
		a.Plus(c)
		ic.byAttach[p.AttachType] = a
		ic.byProg[p.ID] = c
	}
	return ic
}

// owner is the explained causes of an owner's programs.
func (ic *intervalCauses) owner(ids []uint32) agent.MissCauses {
	var c agent.MissCauses
	if ic.byProg == nil {
		return c
	}
	for _, id := range ids {
		c.Plus(ic.byProg[id])
	}
	return c
}

// aggCauses observes each aggregate's misses by cause.
func aggCauses(series func(*view) []aggSeries) func(*view, sink) {
	return func(v *view, s sink) {
		if !v.missesKnown {
			return
		}
		ss := series(v)
		for i := range ss {
			a := &ss[i]
			if a.causes == nil {
				continue
			}
			for j, cause := range agent.Causes {
				if n := a.acc.causes.Get(cause); emitted(j, n) {
					s.Int(int64(n), a.causes[j])
				}
			}
		}
	}
}
