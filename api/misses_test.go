package api

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

func missSnap(seq uint64, n int, ids ...uint32) *agent.Snapshot {
	s := &agent.Snapshot{Seq: seq, Time: time.Unix(int64(seq), 0), MissWatch: agent.MissWatch{Available: true, Slots: 4, Samples: seq}}
	for i := range n {
		s.Misses = append(s.Misses, agent.MissSample{Time: s.Time, ProgID: ids[i%len(ids)], CPU: i, Context: agent.ContextTask,
			Cause: agent.CauseRecursion, Stack: []string{"bpf_prog_inc_misses_counter+0x10"}})
	}
	return s
}

// /v1/misses serves the latest and recent intervals' misses, oldest first,
// filtered by program, at most MissRingSize; each snapshot counted once.
func TestMisses(t *testing.T) {
	var latest atomic.Pointer[agent.Snapshot]
	latest.Store(missSnap(1, 3, 7, 8))
	s := newTestServer(t, Options{Snapshot: latest.Load})
	s.Record(latest.Load())
	s.Record(latest.Load()) // again: nothing added
	latest.Store(missSnap(2, 2, 7))
	// Not recorded by the agent: the request records the latest.
	got := decode[MissList](t, get(t, s.Handler(), "/v1/misses"))
	if len(got.Misses) != 5 || got.Seq != 2 || !got.Watch.Available || got.Watch.Samples != 2 {
		t.Fatalf("got seq %d, %d misses, watch %+v; want seq 2, 5 misses (3 + 2), the latest watch", got.Seq, len(got.Misses), got.Watch)
	}
	if got.Misses[0].Time.Unix() != 1 || got.Misses[4].Time.Unix() != 2 {
		t.Errorf("not oldest first: %v .. %v", got.Misses[0].Time, got.Misses[4].Time)
	}
	got = decode[MissList](t, get(t, s.Handler(), "/v1/misses?prog_id=8"))
	if len(got.Misses) != 1 || got.Misses[0].ProgID != 8 {
		t.Errorf("prog_id=8: %+v, want the one miss of program 8", got.Misses)
	}
	// Bounded: the newest MissRingSize.
	for seq := uint64(3); seq < 3+MissRingSize/agent.MaxMissSamples+2; seq++ {
		s.Record(missSnap(seq, agent.MaxMissSamples, 7))
		latest.Store(missSnap(seq, 0, 7))
	}
	got = decode[MissList](t, get(t, s.Handler(), "/v1/misses"))
	if len(got.Misses) != MissRingSize {
		t.Errorf("%d misses kept, want %d", len(got.Misses), MissRingSize)
	}
	if first := got.Misses[0].Time.Unix(); first < 3 {
		t.Errorf("the oldest kept is from snapshot %d: the first snapshots' should be gone", first)
	}
	for _, q := range []string{"/v1/misses?prog_id=0", "/v1/misses?prog_id=x", "/v1/misses?prog=7"} {
		if w := get(t, s.Handler(), q); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, w.Code)
		}
	}
}
