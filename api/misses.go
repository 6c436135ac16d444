package api

import (
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// MissRingSize bounds the sampled misses /v1/misses keeps across
// intervals: the newest, each snapshot's at most agent.MaxMissSamples.
const MissRingSize = 1024

// missRing keeps the recent intervals' sampled misses (Snapshot.Misses),
// oldest first, at most MissRingSize.
type missRing struct {
	mu      sync.Mutex
	lastSeq uint64
	buf     []agent.MissSample // a ring: next is where the next one goes
	next    int
	full    bool
}

// record adds a snapshot's misses once (a snapshot seen again adds none).
func (r *missRing) record(s *agent.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.Seq != 0 && s.Seq <= r.lastSeq {
		return
	}
	r.lastSeq = s.Seq
	if r.buf == nil && len(s.Misses) > 0 {
		r.buf = make([]agent.MissSample, MissRingSize)
	}
	for _, m := range s.Misses {
		r.buf[r.next] = m
		r.next++
		if r.next == len(r.buf) {
			r.next, r.full = 0, true
		}
	}
}

// recent returns the kept misses, oldest first, of program id (0: all).
func (r *missRing) recent(id uint32) []agent.MissSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []agent.MissSample{}
	add := func(ms []agent.MissSample) {
		for _, m := range ms {
			if id == 0 || m.ProgID == id {
				out = append(out, m)
			}
		}
	}
	if r.full {
		add(r.buf[r.next:])
	}
	add(r.buf[:r.next])
	return out
}

// Record keeps a snapshot's sampled misses for /v1/misses. The agent calls
// it with each snapshot it publishes; a snapshot the API reads without it
// (the latest) is recorded when /v1/misses is asked.
func (s *Server) Record(snap *agent.Snapshot) {
	if snap != nil {
		s.misses.record(snap)
	}
}

// MissList is the answer of /v1/misses.
type MissList struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Watch is the miss watcher's state at the latest scan.
	Watch agent.MissWatch `json:"watch"`
	// Misses are the sampled misses of the latest and recent intervals,
	// oldest first (at most MissRingSize).
	Misses []agent.MissSample `json:"misses"`
}

func (s *Server) getMisses(w http.ResponseWriter, r *http.Request, q url.Values) {
	progID, ok := progIDParam(w, q)
	if !ok {
		return
	}
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	s.misses.record(snap)
	writeJSON(w, r, q, MissList{Seq: snap.Seq, Time: snap.Time, Watch: snap.MissWatch, Misses: s.misses.recent(progID)})
}
