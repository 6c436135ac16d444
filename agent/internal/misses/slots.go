// Package misses is the agent's miss explanation: which programs the miss
// watcher (probes/misswatch) holds watchpoints on, and why. It is pure:
// the agent hands it the scan's programs and arms what it plans.
package misses

import (
	"cmp"
	"slices"
	"time"
)

// Why a program holds watchpoints (WatchedProgram.Why).
const (
	// WhyNamed: named on the command line (Config.WatchPrograms); it
	// never gives its slot away.
	WhyNamed = "named"
	// WhyMissing: its miss episode is open: it misses now.
	WhyMissing = "missing"
	// WhyMissedBefore: it missed before (its episode closed, or its
	// counter was above zero when the agent started) and nobody with
	// newer misses needs its slot. An armed watchpoint costs nothing
	// until the counter is written, and only a miss writes it.
	WhyMissedBefore = "missed-before"
)

// RotateScans is how many scans a missing program keeps its watchpoints
// while other missing programs wait for a slot.
const RotateScans = 3

// Candidate is a program the watcher may watch: named, missing now, or
// with misses counted before.
type Candidate struct {
	ID      uint32
	Named   bool
	Missing bool
	// LastMiss is the end of the last interval it missed in; zero when
	// the agent never saw it miss (its counter was above zero at start).
	LastMiss time.Time
	// Misses is its cumulative count: among programs whose last miss is
	// unknown, the one that missed most goes first.
	Misses uint64
}

func (c *Candidate) why() string {
	switch {
	case c.Named:
		return WhyNamed
	case c.Missing:
		return WhyMissing
	}
	return WhyMissedBefore
}

// Slot is one armed program's place.
type Slot struct {
	Since time.Time
	Why   string
	Scans int // schedules since it was armed
}

// Slots decides which programs hold the debug registers. A program keeps
// its watchpoints until a program with newer misses needs the slot: the
// least recently missing gives way first, then, while missing programs
// wait, those missing longest armed after RotateScans scans (waiters
// served in the order they began to wait); named programs never give
// way. Free slots go to named programs, then missing ones, then those
// that missed before, most recent first.
type Slots struct {
	// Known is how many programs were armed when the kernel first had
	// no free debug register (0: never hit, so every plan is tried).
	Known     int
	armed     map[uint32]*Slot
	waitSince map[uint32]time.Time
	waiting   []uint32
	by        map[uint32]*Candidate // the scan's, kept to be reused
}

// NewSlots starts with nothing armed.
func NewSlots() *Slots {
	return &Slots{armed: map[uint32]*Slot{}, waitSince: map[uint32]time.Time{}, by: map[uint32]*Candidate{}}
}

// Schedule decides the next interval's watchpoints and carries them out:
// disarm lets a program go, arm asks the kernel for one and says whether
// it armed it and, if not, whether that was for want of a free debug
// register (noSlot). cands are every program the watcher could watch
// (the caller leaves out gone and blind ones); an armed program not
// among them gives its slot up.
func (s *Slots) Schedule(now time.Time, cands []Candidate, arm func(id uint32) (armed, noSlot bool), disarm func(id uint32)) {
	by := s.by
	clear(by)
	for i := range cands {
		by[cands[i].ID] = &cands[i]
	}
	for id, sl := range s.armed {
		if c := by[id]; c != nil {
			sl.Why = c.why()
			sl.Scans++
			continue
		}
		disarm(id)
		delete(s.armed, id)
	}
	for i := range cands {
		if c := &cands[i]; s.armed[c.ID] == nil && (c.Named || c.Missing) {
			if _, ok := s.waitSince[c.ID]; !ok {
				s.waitSince[c.ID] = now
			}
		}
	}
	// The first time the kernel says no, the limit is learned, and the
	// plan made again with it: who gives way is known only then.
	for try := 0; try < 2; try++ {
		known := s.Known
		gone, next := s.plan(cands, by)
		for _, id := range gone {
			disarm(id)
			delete(s.armed, id)
		}
		full := false
		for _, id := range next {
			ok, noSlot := arm(id)
			if ok {
				s.armed[id] = &Slot{Since: now, Why: by[id].why()}
				delete(s.waitSince, id)
				continue
			}
			if noSlot {
				if s.Known == 0 || len(s.armed) < s.Known {
					s.Known = len(s.armed)
				}
				full = true
				break
			}
		}
		if !full || known != 0 || s.Known == 0 {
			break
		}
	}
	s.waiting = s.waiting[:0]
	for i := range cands {
		if c := &cands[i]; s.armed[c.ID] == nil && (c.Named || c.Missing) {
			s.waiting = append(s.waiting, c.ID)
		}
	}
	for id := range s.waitSince {
		if c := by[id]; c == nil || s.armed[id] != nil || !c.Named && !c.Missing {
			delete(s.waitSince, id)
		}
	}
	s.sortWaiting(s.waiting, by)
}

// sortWaiting orders waiters: named first, then by when they began to
// wait, then by id.
func (s *Slots) sortWaiting(wait []uint32, by map[uint32]*Candidate) {
	slices.SortFunc(wait, func(a, b uint32) int {
		if na, nb := by[a].Named, by[b].Named; na != nb {
			if na {
				return -1
			}
			return 1
		}
		return cmp.Or(s.waitSince[a].Compare(s.waitSince[b]), cmp.Compare(a, b))
	})
}

// plan says which armed programs give their slots up and which programs
// to arm, in order.
func (s *Slots) plan(cands []Candidate, by map[uint32]*Candidate) (disarm, arm []uint32) {
	var wait []uint32
	for i := range cands {
		if c := &cands[i]; s.armed[c.ID] == nil && (c.Named || c.Missing) {
			wait = append(wait, c.ID)
		}
	}
	s.sortWaiting(wait, by)
	// Those that can give way, first first: programs that missed before,
	// least recently missing first; then missing ones armed for
	// RotateScans scans, longest armed first.
	var before, rotate []uint32
	for id, sl := range s.armed {
		switch c := by[id]; {
		case c.Named:
		case !c.Missing:
			before = append(before, id)
		case sl.Scans >= RotateScans:
			rotate = append(rotate, id)
		}
	}
	slices.SortFunc(before, func(a, b uint32) int { return recency(by[a], by[b]) })
	slices.SortFunc(rotate, func(a, b uint32) int {
		return cmp.Or(cmp.Compare(s.armed[b].Scans, s.armed[a].Scans), cmp.Compare(a, b))
	})
	victims := append(before, rotate...)
	free := -1 // unknown: try every waiter
	if s.Known > 0 {
		free = max(s.Known-len(s.armed), 0)
	}
	for _, id := range wait {
		switch {
		case free != 0:
			if free > 0 {
				free--
			}
		case len(victims) > 0:
			disarm = append(disarm, victims[0])
			victims = victims[1:]
		}
		// With no slot and nobody to give way it is still tried: a
		// debugger may have freed a register since the limit was learned.
		arm = append(arm, id)
	}
	// Free slots after the waiters go to programs that missed before,
	// most recent first.
	var rest []uint32
	for i := range cands {
		if c := &cands[i]; s.armed[c.ID] == nil && !c.Named && !c.Missing && c.Misses > 0 {
			rest = append(rest, c.ID)
		}
	}
	slices.SortFunc(rest, func(a, b uint32) int { return recency(by[b], by[a]) })
	for _, id := range rest {
		if free == 0 {
			break
		}
		if free > 0 {
			free--
		}
		arm = append(arm, id)
	}
	return disarm, arm
}

// recency orders a before b when a missed less recently: an unknown last
// miss is the oldest, then fewer misses, then the lower id.
func recency(a, b *Candidate) int {
	return cmp.Or(a.LastMiss.Compare(b.LastMiss), cmp.Compare(a.Misses, b.Misses), cmp.Compare(a.ID, b.ID))
}

// Slot is id's place, nil when it is not armed.
func (s *Slots) Slot(id uint32) *Slot { return s.armed[id] }

// Waiting are the named or missing programs without a slot after the
// last Schedule, named first, then longest waiting first.
func (s *Slots) Waiting() []uint32 { return append([]uint32(nil), s.waiting...) }
