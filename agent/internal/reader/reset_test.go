package reader

import (
	"reflect"
	"testing"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
)

// TestResetDynamic changes each field of a Program that is not one of the
// static ones (set once per program id, never by a scan): resetDynamic
// must undo every such change, so a reused slot never carries a previous
// scan's counters, joins or owners. A new Program field fails here until
// it is reset by resetDynamic or listed as static.
func TestResetDynamic(t *testing.T) {
	uid, memlock := uint32(7), uint64(4096)
	s := Program{ID: 3, Name: "n", Tag: "t", Type: "kprobe", AttachType: Unattached, UID: &uid, Memlock: &memlock, MapIDs: []uint32{1}}
	scantest.EachDynamicChange(t, func() Program { return s }, func(name string, p Program) {
		if reflect.DeepEqual(p, s) {
			t.Fatalf("changing %s left the program equal", name)
		}
		resetDynamic(&p, &s)
		if !reflect.DeepEqual(p, s) {
			t.Errorf("resetDynamic does not reset %s", name)
		}
	})
}
