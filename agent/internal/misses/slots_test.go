package misses

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// scan is one scan's view of the programs: which miss now (and so
// missed last in this scan), which are named, and each one's count.
type scan struct {
	missing []uint32
	named   []uint32
	// before: programs that missed before this run of scans (counter
	// above zero, last miss unknown) with their counts.
	before map[uint32]uint64
	// want is the programs armed after the scan, sorted; nil: not checked.
	want []uint32
	// waiting is the waiters after the scan; nil: not checked.
	waiting []uint32
}

// run plays scans against a CPU with hw debug registers: each Plan is
// carried out as the agent does (disarm, then arm in order until the
// kernel has no free register), and the armed set is returned per scan.
func run(t *testing.T, hw int, scans []scan) [][]uint32 {
	t.Helper()
	s := NewSlots()
	t0 := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	last := map[uint32]time.Time{}
	counts := map[uint32]uint64{}
	var out [][]uint32
	for i, sc := range scans {
		now := t0.Add(time.Duration(i) * time.Second)
		for id, n := range sc.before {
			counts[id] = max(counts[id], n)
		}
		for _, id := range sc.missing {
			counts[id]++
			last[id] = now
		}
		var cands []Candidate
		for id := range uint32(16) {
			c := Candidate{ID: id, Named: slices.Contains(sc.named, id), Missing: slices.Contains(sc.missing, id), LastMiss: last[id], Misses: counts[id]}
			if c.Named || c.Missing || c.Misses > 0 {
				cands = append(cands, c)
			}
		}
		regs := map[uint32]bool{}
		for id := range s.armed {
			regs[id] = true
		}
		s.Schedule(now, cands, func(id uint32) (bool, bool) {
			if len(regs) == hw {
				return false, true
			}
			regs[id] = true
			return true, false
		}, func(id uint32) {
			if !regs[id] {
				t.Errorf("scan %d: disarming %d, not armed", i, id)
			}
			delete(regs, id)
		})
		var got []uint32
		for id := range s.armed {
			got = append(got, id)
			if !regs[id] {
				t.Errorf("scan %d: %d recorded armed, holds no register", i, id)
			}
		}
		slices.Sort(got)
		if len(got) > hw {
			t.Fatalf("scan %d: %d armed on %d registers", i, len(got), hw)
		}
		if sc.want != nil && !slices.Equal(got, sc.want) {
			t.Errorf("scan %d: armed %v, want %v", i, got, sc.want)
		}
		if sc.waiting != nil && !slices.Equal(s.Waiting(), sc.waiting) {
			t.Errorf("scan %d: waiting %v, want %v", i, s.Waiting(), sc.waiting)
		}
		out = append(out, got)
	}
	return out
}

func TestSlots(t *testing.T) {
	quiet := scan{}
	for _, tc := range []struct {
		name  string
		hw    int
		scans []scan
	}{
		{
			// The bursts the issue saw unexplained: the program keeps
			// its watchpoints through the quiet spell (its episode
			// closes after two quiet scans), so its next burst is
			// watched.
			name: "a burst, a quiet spell longer than an episode, a burst",
			hw:   4,
			scans: []scan{
				{missing: []uint32{2, 3}, want: []uint32{2, 3}},
				{want: []uint32{2, 3}}, {want: []uint32{2, 3}}, {want: []uint32{2, 3}}, {want: []uint32{2, 3}},
				{missing: []uint32{2, 3}, want: []uint32{2, 3}},
			},
		},
		{
			name: "at start, counters above zero take the free slots, most misses first",
			hw:   2,
			scans: []scan{
				{before: map[uint32]uint64{1: 5, 2: 9, 3: 1}, want: []uint32{1, 2}, waiting: []uint32{}},
				{want: []uint32{1, 2}},
			},
		},
		{
			name: "a program with newer misses takes the least recently missing's slot",
			hw:   2,
			scans: []scan{
				{missing: []uint32{1}, want: []uint32{1}},
				{missing: []uint32{2}, want: []uint32{1, 2}},
				quiet, quiet,
				{missing: []uint32{3}, want: []uint32{2, 3}},
				quiet,
				{missing: []uint32{1}, want: []uint32{1, 3}},
			},
		},
		{
			name: "a miss the agent saw is more recent than any from before it started",
			hw:   2,
			scans: []scan{
				{missing: []uint32{3}, before: map[uint32]uint64{1: 9, 2: 5}, want: []uint32{1, 3}},
				quiet, quiet,
				{missing: []uint32{4}, want: []uint32{3, 4}},
			},
		},
		{
			name: "named programs never give way",
			hw:   2,
			scans: []scan{
				{named: []uint32{1, 2}, want: []uint32{1, 2}},
				{named: []uint32{1, 2}, missing: []uint32{3}, want: []uint32{1, 2}, waiting: []uint32{3}},
				{named: []uint32{1, 2}, missing: []uint32{3}, want: []uint32{1, 2}},
				{named: []uint32{1, 2}, missing: []uint32{3}, want: []uint32{1, 2}},
				{named: []uint32{1, 2}, missing: []uint32{3}, want: []uint32{1, 2}, waiting: []uint32{3}},
			},
		},
		{
			name: "a named program takes a slot from one that missed before",
			hw:   1,
			scans: []scan{
				{before: map[uint32]uint64{4: 3}, want: []uint32{4}},
				{named: []uint32{1}, want: []uint32{1}},
			},
		},
		{
			name: "a missing program waits while the others miss too, until rotation",
			hw:   1,
			scans: []scan{
				{missing: []uint32{1}, want: []uint32{1}},
				{missing: []uint32{1, 2}, want: []uint32{1}, waiting: []uint32{2}},
				{missing: []uint32{1, 2}, want: []uint32{1}},
				{missing: []uint32{1, 2}, want: []uint32{2}, waiting: []uint32{1}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, tc.hw, tc.scans) })
	}
}

// TestSlotsRotation: more programs miss than there are debug registers
// (x86: 4): every one is watched in turn, none waits more than a round,
// and the registers are never idle while someone waits.
func TestSlotsRotation(t *testing.T) {
	const hw, progs, rounds = 4, 6, 30
	all := []uint32{1, 2, 3, 4, 5, 6}
	scans := make([]scan, rounds)
	for i := range scans {
		scans[i] = scan{missing: all}
	}
	armed := run(t, hw, scans)
	// The longest any program waits: the others' turns, RotateScans
	// each, one register at a time at worst.
	maxWait := (progs - 1) * (RotateScans + 1)
	for _, id := range all {
		wait := 0
		watched := 0
		for i, a := range armed {
			if slices.Contains(a, id) {
				watched++
				wait = 0
				continue
			}
			if wait++; wait > maxWait {
				t.Errorf("program %d waited %d scans by scan %d (armed: %v)", id, wait, i, fmt.Sprint(armed))
				break
			}
		}
		if watched < rounds/progs {
			t.Errorf("program %d watched in %d of %d scans, want at least %d", id, watched, rounds, rounds/progs)
		}
	}
	for i, a := range armed {
		if len(a) != hw {
			t.Errorf("scan %d: %d of %d registers used while programs wait: %v", i, len(a), hw, a)
		}
	}
}
