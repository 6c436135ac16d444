// Package history keeps a bounded, in-memory time series per BPF program:
// the last N interval deltas of runs, run time, recursion misses and kprobe
// link missed counts, recorded from the agent's snapshots. `top` keeps one
// for its detail view and the agent keeps one for the API's
// /v1/programs/{id}/history.
//
// Memory is bounded: each ring holds at most its capacity of fixed-size
// points (48 bytes each), and rings of unloaded programs are dropped after
// Linger or when more than MaxUnloaded of them wait.
package history

import (
	"sort"
	"sync"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// Window is how far back a ring reaches by default: enough to see when a
// miss storm or a cost regression started.
const Window = 5 * time.Minute

// MaxPoints caps a ring whatever the interval: a 100ms top would otherwise
// keep 3,000 points per program. Below Window/MaxPoints (500ms) a ring
// covers less than Window.
const MaxPoints = 600

// Linger is how long the ring of an unloaded program is kept, so an open
// view (or a client polling the API) can say "unloaded" rather than lose it.
const Linger = time.Minute

// MaxUnloaded bounds the rings kept for unloaded programs, so a node that
// loads and unloads programs quickly cannot grow the store within Linger.
const MaxUnloaded = 128

// Capacity is the ring size that covers window at one point per interval,
// between 2 and MaxPoints.
func Capacity(window, interval time.Duration) int {
	if interval <= 0 {
		return MaxPoints
	}
	n := int((window + interval - 1) / interval)
	return min(max(n, 2), MaxPoints)
}

// Point is one scan interval of one program: the counters' deltas and the
// rates derived from them. Unlike agent.Rates, recursion misses and link
// missed are kept apart: they mean different things (see Series).
type Point struct {
	// Time is the end of the interval (the scan's time).
	Time     time.Time     `json:"time"`
	Interval time.Duration `json:"interval_ns"`

	Runs      uint64 `json:"runs"`
	RunTimeNs uint64 `json:"run_time_ns"`
	// RecursionMisses is nil (JSON null) where the kernel has no such
	// counter (before 5.12): absent, not 0.
	RecursionMisses *uint64 `json:"recursion_misses"`
	LinkMissed      uint64  `json:"link_missed"`

	RunsPerSec            float64  `json:"runs_per_sec"`
	NsPerRun              float64  `json:"ns_per_run"`
	CPUShare              float64  `json:"cpu_share"`                // fraction of one CPU
	RecursionMissesPerSec *float64 `json:"recursion_misses_per_sec"` // nil with RecursionMisses
	LinkMissedPerSec      float64  `json:"link_missed_per_sec"`
}

// Series is one program's history, oldest point first.
type Series struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	// MissKind says what a recursion miss of this program means on this
	// kernel (recursion, contention-possible, unknown).
	MissKind string `json:"miss_kind"`
	// HasRecursionMisses is false when the kernel does not report the
	// counter (before 5.12): the recursion miss figures are then nil.
	HasRecursionMisses bool `json:"has_recursion_misses"`
	// HasLinkMissed is true when a link of the program has a kprobe missed
	// counter (perf_event kprobe and kprobe_multi links, Linux 6.7+).
	HasLinkMissed bool `json:"has_link_missed"`
	// Cumulative counters at the newest point, as the kernel reported them.
	RunCount             uint64  `json:"run_count"`
	RecursionMissesTotal *uint64 `json:"recursion_misses_total"` // nil without the counter
	LinkMissedTotal      uint64  `json:"link_missed_total"`
	// Capacity is the most points the ring keeps.
	Capacity int `json:"capacity"`
	// UnloadedAt is the time of the first scan that no longer saw the
	// program; nil while it is loaded.
	UnloadedAt *time.Time `json:"unloaded_at"`
	Points     []Point    `json:"points"`
}

// point is the stored form of a Point: 48 bytes, rates derived on read.
type point struct {
	t, dt                       int64
	runs, runTime, misses, lmis uint64
}

type ring struct {
	buf   []point // grows to cap, then wraps at next
	next  int
	full  bool
	name  string
	kind  string
	hasRM bool
	hasLM bool
	runs  uint64
	rmTot uint64
	lmTot uint64
	gone  time.Time // zero while loaded
	gen   uint64    // the last Record that saw the program
	// entry is the snapshot entry recorded last: entries are immutable
	// (an unchanged program keeps its entry), so the same entry again has
	// the same name and totals.
	entry *agent.ProgramStat
}

func (r *ring) add(p point, capacity int) {
	if !r.full && len(r.buf) < capacity {
		if len(r.buf) == cap(r.buf) {
			// Grow by doubling, never past capacity: a short-lived program
			// costs a few points, not a full ring.
			nb := make([]point, len(r.buf), min(capacity, max(8, 2*len(r.buf))))
			copy(nb, r.buf)
			r.buf = nb
		}
		r.buf = append(r.buf, p)
		if len(r.buf) == capacity {
			r.full, r.next = true, 0
		}
		return
	}
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
}

// ordered returns the points oldest first.
func (r *ring) ordered() []point {
	if !r.full {
		return r.buf
	}
	return append(append(make([]point, 0, len(r.buf)), r.buf[r.next:]...), r.buf[:r.next]...)
}

// Store holds the rings of every program. It is safe for one writer
// (Record) and concurrent readers (Series).
type Store struct {
	capacity int
	mu       sync.RWMutex
	rings    map[uint32]*ring
	gen      uint64 // counts Record calls
}

// New makes a store whose rings keep capacity points each.
func New(capacity int) *Store {
	return &Store{capacity: max(capacity, 1), rings: map[uint32]*ring{}}
}

// Record adds one point per program of snap. A program missing from snap
// is marked unloaded at snap.Time; its ring is dropped Linger later.
func (s *Store) Record(snap *agent.Snapshot) {
	if snap == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	prevScan := snap.Time.Add(-snap.Interval)
	for i := range snap.Programs {
		p := snap.Programs[i]
		r := s.rings[p.ID]
		if r == nil {
			r = &ring{}
			s.rings[p.ID] = r
		}
		r.gen = s.gen
		if r.entry != p {
			r.entry = p
			r.name, r.kind, r.gone = p.Name, p.MissKind, time.Time{}
			r.hasRM = p.RecursionMisses != nil
			r.runs, r.rmTot, r.lmTot, r.hasLM = p.RunCount, 0, 0, false
			if p.RecursionMisses != nil {
				r.rmTot = *p.RecursionMisses
			}
			for _, l := range p.Links {
				if l.Missed != nil {
					r.hasLM = true
					r.lmTot += *l.Missed
				}
			}
		}
		// No point without an interval (the first scan), nor for a program
		// first seen but loaded before the previous scan: its zero delta
		// means "not measured", not "idle".
		if snap.Interval <= 0 || (p.New && p.LoadTime.Before(prevScan)) {
			continue
		}
		r.add(point{
			t: snap.Time.UnixNano(), dt: int64(snap.Interval),
			runs: p.Delta.Runs, runTime: p.Delta.RunTimeNs, misses: p.Delta.Misses, lmis: p.Delta.LinkMissed,
		}, s.capacity)
	}
	var gone []uint32
	for id, r := range s.rings {
		if r.gen == s.gen {
			continue
		}
		if r.gone.IsZero() {
			r.gone = snap.Time
		}
		if snap.Time.Sub(r.gone) > Linger {
			delete(s.rings, id)
			continue
		}
		gone = append(gone, id)
	}
	if len(gone) > MaxUnloaded {
		sort.Slice(gone, func(a, b int) bool { return s.rings[gone[a]].gone.Before(s.rings[gone[b]].gone) })
		for _, id := range gone[:len(gone)-MaxUnloaded] {
			delete(s.rings, id)
		}
	}
}

// Series returns a copy of program id's history, false when the store has
// none (an unknown id, or one unloaded more than Linger ago).
func (s *Store) Series(id uint32) (Series, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.rings[id]
	if !ok {
		return Series{}, false
	}
	out := Series{
		ID: id, Name: r.name, MissKind: r.kind, HasRecursionMisses: r.hasRM, HasLinkMissed: r.hasLM,
		RunCount: r.runs, LinkMissedTotal: r.lmTot,
		Capacity: s.capacity, Points: []Point{},
	}
	if r.hasRM {
		tot := r.rmTot
		out.RecursionMissesTotal = &tot
	}
	if !r.gone.IsZero() {
		g := r.gone
		out.UnloadedAt = &g
	}
	for _, p := range r.ordered() {
		out.Points = append(out.Points, p.public(r.hasRM))
	}
	return out, true
}

// Len is the number of rings held, unloaded ones included.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.rings)
}

// public is p as the API shows it; hasRM says the kernel counts recursion
// misses (else they are nil, not 0).
func (p point) public(hasRM bool) Point {
	out := Point{
		Time: time.Unix(0, p.t), Interval: time.Duration(p.dt),
		Runs: p.runs, RunTimeNs: p.runTime, LinkMissed: p.lmis,
	}
	if hasRM {
		m := p.misses
		out.RecursionMisses = &m
	}
	if p.dt > 0 {
		sec := time.Duration(p.dt).Seconds()
		out.RunsPerSec = float64(p.runs) / sec
		out.CPUShare = float64(p.runTime) / float64(p.dt)
		if hasRM {
			r := float64(p.misses) / sec
			out.RecursionMissesPerSec = &r
		}
		out.LinkMissedPerSec = float64(p.lmis) / sec
	}
	if p.runs > 0 {
		out.NsPerRun = float64(p.runTime) / float64(p.runs)
	}
	return out
}
