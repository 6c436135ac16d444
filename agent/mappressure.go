package agent

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bpfleet/bpfleet/probes/mappressure"
	"github.com/bpfleet/bpfleet/probes/mapstats"
)

// pressure counts each LRU hash map's evictions and, with
// Config.MapRefusals, each hash-family map's refused updates with the
// agent's own probes (probes/mappressure), read with the maps. The kernel
// keeps neither count, so they start when the probes were attached: a map
// older than that has its counts since then only (Map.PressureSinceStart).
type pressure struct {
	p *mappressure.Probe
	r *mappressure.Refusals
	// reason and refusedReason say why there are no counts.
	reason, refusedReason string
	since                 time.Time
	// olderThan: maps up to this id were there at the first read after
	// the probes were attached, so may be older than them.
	olderThan uint32
	counts    map[uint32]uint64
	refused   map[uint32]mappressure.RefusedCounts
	gone      []uint32
}

// newPressure attaches the probes; a refusal is kept as the reason the
// maps carry no counts, never an error of the agent.
func newPressure(refusals bool) *pressure {
	pr := &pressure{since: time.Now(), counts: map[uint32]uint64{}, refused: map[uint32]mappressure.RefusedCounts{},
		refusedReason: offRefusals}
	var err error
	if pr.p, err = mappressure.Load(); err != nil {
		pr.reason = refusalReason("the eviction counter (fexit on "+mappressure.EvictTarget+")", err)
	}
	if refusals {
		pr.refusedReason = ""
		if pr.r, err = mappressure.LoadRefusals(); err != nil {
			pr.refusedReason = refusalReason("the refused-update counter (fexit on the hash family's update functions)", err)
		}
	}
	return pr
}

// Why a count is off, for the agent and for bpfleet maps alike.
const (
	offPressure = "off (the agent's --map-pressure; bpfleet maps counts with --watch)"
	offRefusals = "off (the agent's --map-refusals; bpfleet maps counts with --watch --refusals)"
)

func refusalReason(what string, err error) string {
	var r *mappressure.Refused
	if errors.As(err, &r) {
		return "the kernel refused " + what + ": " + r.Reason()
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// read takes the counts for this map read of maps (ascending by id).
// Counts of maps that are gone are deleted from the probes' tables. It
// costs a lookup per counted map, not per map: a node of 30,000 maps with
// a few that evict pays for those few.
func (pr *pressure) read(maps []mapstats.Map) error {
	if pr == nil || pr.p == nil && pr.r == nil {
		return nil
	}
	if pr.olderThan == 0 && len(maps) > 0 {
		pr.olderThan = maps[len(maps)-1].ID
	}
	present := func(id uint32) bool {
		_, ok := slices.BinarySearchFunc(maps, id, func(m mapstats.Map, id uint32) int { return cmp.Compare(m.ID, id) })
		return ok
	}
	var errs []error
	if pr.p != nil {
		if err := pr.p.Read(pr.counts); err != nil {
			clear(pr.counts)
			errs = append(errs, err)
		}
		errs = append(errs, pr.p.Forget(gone(pr.gone[:0], pr.counts, present)))
	}
	if pr.r != nil {
		if err := pr.r.Read(pr.refused); err != nil {
			clear(pr.refused)
			errs = append(errs, err)
		}
		errs = append(errs, pr.r.Forget(gone(pr.gone[:0], pr.refused, present)))
	}
	return errors.Join(errs...)
}

// gone appends to dst the ids of counts that are not present.
func gone[V any](dst []uint32, counts map[uint32]V, present func(uint32) bool) []uint32 {
	for id := range counts {
		if !present(id) {
			dst = append(dst, id)
		}
	}
	return dst
}

// counted is one of a map's pressure counts for newMap and sameMap.
type counted struct {
	known     bool
	n         uint64
	rate      float64
	rateKnown bool
}

// newCounted is a count n with its rate from prev, the map's count at the
// last read dt ago (nil for a new map).
func newCounted(n uint64, prev *uint64, dt time.Duration) counted {
	c := counted{known: true, n: n}
	if prev != nil && dt > 0 && n >= *prev {
		c.rate, c.rateKnown = float64(n-*prev)/dt.Seconds(), true
	}
	return c
}

// same says the fields n and rate carry c.
func (c counted) same(n *uint64, rate *float64) bool {
	if (n != nil) != c.known || (rate != nil) != c.rateKnown {
		return false
	}
	return (!c.known || *n == c.n) && (!c.rateKnown || *rate == c.rate)
}

// mapPressure is a map's counts.
type mapPressure struct {
	evicted, refused counted
	sinceStart       bool
}

// of is map id's counts as read; prev is its entry at the last read dt ago
// (nil for a new map).
func (pr *pressure) of(id uint32, typ string, prev *Map, dt time.Duration) mapPressure {
	var mp mapPressure
	if pr == nil {
		return mp
	}
	var pe, pr2 *uint64
	if prev != nil {
		pe, pr2 = prev.Evictions, prev.RefusedUpdates
	}
	if pr.p != nil && (typ == "lru_hash" || typ == "lru_percpu_hash") {
		mp.evicted = newCounted(pr.counts[id], pe, dt)
	}
	if pr.r != nil && hashFamily(typ) {
		c := pr.refused[id]
		mp.refused = newCounted(c.Full+c.NoMem, pr2, dt)
	}
	mp.sinceStart = (mp.evicted.known || mp.refused.known) && id <= pr.olderThan
	return mp
}

// same says m carries mp.
func (mp mapPressure) same(m *Map) bool {
	return m.PressureSinceStart == mp.sinceStart && mp.evicted.same(m.Evictions, m.EvictionsPerSecond) &&
		mp.refused.same(m.RefusedUpdates, m.RefusedUpdatesPerSecond)
}

// scan says in the maps' scan where the counts come from.
func (pr *pressure) scan(s *MapScan) {
	if pr == nil {
		s.EvictionsReason, s.RefusedReason = offPressure, offRefusals
		return
	}
	s.EvictionsReason, s.RefusedReason = pr.reason, pr.refusedReason
	if pr.p != nil || pr.r != nil {
		s.PressureSince = pr.since
	}
	if pr.r != nil && len(pr.r.Missing) > 0 {
		s.RefusedReason = fmt.Sprintf("the kernel refused %d of the update functions, whose maps' refusals are not counted: %v", len(pr.r.Missing), pr.r.Missing)
	}
}

func (pr *pressure) close() {
	if pr == nil {
		return
	}
	if pr.p != nil {
		pr.p.Close()
	}
	if pr.r != nil {
		pr.r.Close()
	}
}
