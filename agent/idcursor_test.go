package agent

import (
	"slices"
	"testing"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// TestIDCursor looks ids up in ascending order (the merge Scan relies on),
// out of order and in a list with gaps: every answer must equal a plain
// search's.
func TestIDCursor(t *testing.T) {
	ids := []uint32{2, 3, 5, 8, 13, 21}
	for _, lookups := range [][]uint32{
		{1, 2, 3, 4, 5, 8, 9, 13, 21, 22},
		{21, 13, 8, 5, 3, 2, 1},
		{5, 2, 21, 3, 3, 22, 1, 8},
		{},
	} {
		c := idCursor{ids: ids}
		for _, id := range lookups {
			j, ok := c.find(id)
			wantJ, wantOK := slices.BinarySearch(ids, id)
			if ok != wantOK || (ok && j != wantJ) {
				t.Errorf("lookups %v: find(%d) = %d %v, want %d %v", lookups, id, j, ok, wantJ, wantOK)
			}
			if c.has(id) != wantOK {
				t.Errorf("has(%d) = %v", id, !wantOK)
			}
		}
	}
	var empty idCursor
	if _, ok := empty.find(1); ok || empty.has(1) {
		t.Error("found an id in an empty list")
	}
}

// TestSortByID keeps each id with its counters and entry.
func TestSortByID(t *testing.T) {
	for _, ids := range [][]uint32{{1, 2, 3}, {3, 1, 2}, {9, 4, 7, 1}, {}} {
		sts := make([]progState, len(ids))
		for i, id := range ids {
			sts[i] = progState{c: prog.Counters{Runs: uint64(id) * 10}, e: &ProgramStat{Program: Program{ID: id}}}
		}
		sortByID(ids, sts)
		if !slices.IsSorted(ids) {
			t.Errorf("not sorted: %v", ids)
		}
		for i, id := range ids {
			if sts[i].c.Runs != uint64(id)*10 || sts[i].e.ID != id {
				t.Errorf("id %d has counters %+v, entry of %d", id, sts[i].c, sts[i].e.ID)
			}
		}
	}
}
