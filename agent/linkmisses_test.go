package agent

import (
	"github.com/bpfleet/bpfleet/agent/internal/misses"
	"testing"
	"time"
)

// TestLinkMissEpisodeReasons: a link_missed episode carries its misses by
// reason, adding up to its misses: each interval's growth of the link's
// nesting and maxactive where the reader split it, unknown where either
// read had only the sum (a syscall read).
func TestLinkMissEpisodeReasons(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	stat := func(links ...Link) *ProgramStat {
		return &ProgramStat{Program: Program{ID: 9, Links: links}}
	}
	split := func(missed, nesting, maxactive uint64) Link {
		return Link{ID: 3, Missed: u(missed), MissedNesting: u(nesting), MissedMaxactive: u(maxactive)}
	}
	sumOnly := func(missed uint64) Link { return Link{ID: 3, Missed: u(missed)} }
	scans := []struct {
		e    *ProgramStat
		want LinkMisses // this interval's growth
	}{
		{stat(split(10, 6, 4)), LinkMisses{}}, // first sight: history, not an interval's
		{stat(split(15, 7, 8)), LinkMisses{Nesting: 1, Maxactive: 4}},
		{stat(sumOnly(17)), LinkMisses{Unknown: 2}},        // the iterator fell back to a syscall read
		{stat(split(20, 8, 12)), LinkMisses{Unknown: 3}},   // split again, but not at the last read
		{stat(split(26, 8, 18)), LinkMisses{Maxactive: 6}}, //
		{stat(split(26, 8, 18)), LinkMisses{}},             // quiet
		{stat(Link{ID: 4, Type: "tracing"}), LinkMisses{}}, // no missed: nothing
	}
	a := &Agent{}
	tr := misses.NewTracker(5)
	now := time.Unix(1000, 0)
	var old *ProgramStat
	var total LinkMisses
	var eps []Episode
	for i, s := range scans {
		obs := a.linkMisses(nil, old, s.e)
		var got LinkMisses
		for _, o := range obs {
			if o.LinkBy.Sum() != o.Misses {
				t.Errorf("scan %d: observation's reasons %+v do not add up to its %d misses", i, o.LinkBy, o.Misses)
			}
			got.Add(o.LinkBy)
		}
		if got != s.want {
			t.Errorf("scan %d: interval's link misses by reason %+v, want %+v", i, got, s.want)
		}
		total.Add(s.want)
		now = now.Add(time.Second)
		eps = tr.Observe(now, time.Second, obs, func(misses.Key) bool { return true })
		old = s.e
	}
	if len(eps) != 1 || eps[0].Source != SourceLinkMissed {
		t.Fatalf("episodes %+v, want one link_missed episode", eps)
	}
	if eps[0].LinkMissedBy != total || eps[0].LinkMissedBy.Sum() != eps[0].Misses {
		t.Errorf("episode: %d misses by reason %+v, want %+v", eps[0].Misses, eps[0].LinkMissedBy, total)
	}
}
