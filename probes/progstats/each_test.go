package progstats

import (
	"reflect"
	"testing"
)

// TestReadEachEqualsRead: ReadEach hands out, one by one, the records Read
// returns for the same programs, whole and statistics-only alike. Counters
// are left out of the comparison: the iterator itself runs between reads.
func TestReadEachEqualsRead(t *testing.T) {
	it := loadIter(t)
	ours := map[uint32]bool{}
	for _, name := range []string{"each_a", "each_b", "each_c"} {
		ours[progID(t, socketFilter(t, name))] = true
	}
	for _, known := range []uint32{0, 1 << 30} { // whole records; then statistics only
		if err := it.SetKnownMaxID(known); err != nil {
			t.Fatal(err)
		}
		want, err := it.Read(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []Record
		if err := it.ReadEach(func(r *Record) { got = append(got, *r) }); err != nil {
			t.Fatal(err)
		}
		byID := map[uint32]Record{}
		for _, r := range got {
			byID[r.ID] = r
		}
		compared := 0
		for _, w := range want {
			g, ok := byID[w.ID]
			if !ok {
				continue // unloaded between the reads (another test's)
			}
			g.RunCount, g.RunTimeNs, g.Misses = 0, 0, 0
			w.RunCount, w.RunTimeNs, w.Misses = 0, 0, 0
			if !reflect.DeepEqual(g, w) {
				t.Errorf("known %d, program %d:\nReadEach %+v\nRead     %+v", known, w.ID, g, w)
			}
			if ours[w.ID] {
				compared++
			}
		}
		if compared != len(ours) {
			t.Errorf("known %d: compared %d of the %d programs loaded here", known, compared, len(ours))
		}
		if known != 0 && len(got) > 0 && got[0].Whole {
			t.Errorf("known %d: record %d is whole, want statistics only", known, got[0].ID)
		}
	}
}
