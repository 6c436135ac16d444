package agent

import (
	"reflect"
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

// TestResetDynamic changes each field of a Program that is not one of the
// static ones (set once per program id, never by a scan): resetDynamic
// must undo every such change, so a reused slot never carries a previous
// scan's counters, joins or owners. A new Program field fails here until
// it is reset by resetDynamic or listed as static.
func TestResetDynamic(t *testing.T) {
	uid, memlock := uint32(7), uint64(4096)
	s := Program{ID: 3, Name: "n", Tag: "t", Type: "kprobe", AttachType: Unattached, UID: &uid, Memlock: &memlock, MapIDs: []uint32{1}}
	eachDynamicChange(t, func() Program { return s }, func(name string, p Program) {
		if reflect.DeepEqual(p, s) {
			t.Fatalf("changing %s left the program equal", name)
		}
		resetDynamic(&p, &s)
		if !reflect.DeepEqual(p, s) {
			t.Errorf("resetDynamic does not reset %s", name)
		}
	})
}

// staticFields are the Program fields set once per program id, never by a
// scan.
var staticFields = map[string]bool{"ID": true, "Name": true, "Tag": true, "Type": true, "LoadTime": true, "UID": true,
	"MapIDs": true, "BTFID": true, "JitedSize": true, "XlatedSize": true, "Memlock": true, "VerifiedInsns": true}

// eachDynamicChange calls check with a fresh copy of a Program (from
// fresh) in which one field that is not static was changed, field by
// field; a field of a kind it cannot change fails the test.
func eachDynamicChange(t *testing.T, fresh func() Program, check func(name string, p Program)) {
	t.Helper()
	typ := reflect.TypeFor[Program]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if staticFields[f.Name] {
			continue
		}
		p := fresh()
		v := reflect.ValueOf(&p).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("changed")
		case reflect.Uint64, reflect.Uint32:
			v.SetUint(99)
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(f.Type, 2, 2))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, v.Kind())
		}
		check(f.Name, p)
	}
}
