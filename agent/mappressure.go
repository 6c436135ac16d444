package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/bpfleet/bpfleet/probes/mappressure"
)

// pressure counts each LRU hash map's evictions with the agent's own probe
// (probes/mappressure), read with the maps. The kernel keeps no eviction
// counter, so the counts start when the probe was attached: a map older
// than that has its evictions since then only (Map.EvictionsSinceStart).
type pressure struct {
	p *mappressure.Probe
	// reason is why there are no counts (the kernel refused the probe).
	reason string
	since  time.Time
	// olderThan: maps up to this id were there at the first read after
	// the probe was attached, so may be older than it.
	olderThan uint32
	counts    map[uint32]uint64
	gone      []uint32
}

// newPressure attaches the probe; a refusal is kept as the reason the maps
// carry no evictions, never an error of the agent.
func newPressure() *pressure {
	p, err := mappressure.Load()
	if err != nil {
		var r *mappressure.Refused
		if errors.As(err, &r) {
			return &pressure{reason: "the kernel refused the eviction counter (fexit on " + mappressure.EvictTarget + "): " + r.Reason()}
		}
		return &pressure{reason: fmt.Sprintf("eviction counter: %v", err)}
	}
	return &pressure{p: p, since: time.Now(), counts: map[uint32]uint64{}}
}

// read takes the counts for this map read; ids are the maps read, in
// ascending order. Counts of maps that are gone are deleted from the
// probe's table.
func (pr *pressure) read(ids func(yield func(uint32) bool)) error {
	if pr == nil || pr.p == nil {
		return nil
	}
	if err := pr.p.Read(pr.counts); err != nil {
		clear(pr.counts)
		return err
	}
	seen := make(map[uint32]struct{}, len(pr.counts))
	var max uint32
	for id := range ids {
		max = id
		if _, ok := pr.counts[id]; ok {
			seen[id] = struct{}{}
		}
	}
	if pr.olderThan == 0 {
		pr.olderThan = max
	}
	pr.gone = pr.gone[:0]
	for id := range pr.counts {
		if _, ok := seen[id]; !ok {
			pr.gone = append(pr.gone, id)
		}
	}
	return pr.p.Forget(pr.gone)
}

// evictions is one map's count for newMap and sameMap.
type evictions struct {
	known, sinceStart bool
	n                 uint64
	rate              float64
	rateKnown         bool
}

// of is map id's evictions as read, with its rate from prev, the map's
// entry at the last read dt ago (nil for a new map).
func (pr *pressure) of(id uint32, lru bool, prev *Map, dt time.Duration) evictions {
	if pr == nil || pr.p == nil || !lru {
		return evictions{}
	}
	e := evictions{known: true, n: pr.counts[id], sinceStart: id <= pr.olderThan}
	if prev != nil && prev.Evictions != nil && dt > 0 && e.n >= *prev.Evictions {
		e.rate, e.rateKnown = float64(e.n-*prev.Evictions)/dt.Seconds(), true
	}
	return e
}

// same says m carries e.
func (e evictions) same(m *Map) bool {
	if (m.Evictions != nil) != e.known || (m.EvictionsPerSecond != nil) != e.rateKnown || m.EvictionsSinceStart != e.sinceStart {
		return false
	}
	return (!e.known || *m.Evictions == e.n) && (!e.rateKnown || *m.EvictionsPerSecond == e.rate)
}

func (pr *pressure) close() {
	if pr != nil && pr.p != nil {
		pr.p.Close()
	}
}

// isLRU says the kernel's LRU hash evicts entries of maps of this type.
func isLRU(typ string) bool { return typ == "lru_hash" || typ == "lru_percpu_hash" }
