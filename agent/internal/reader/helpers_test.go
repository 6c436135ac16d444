package reader

import (
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/stats"
	"github.com/bpfleet/bpfleet/internal/config"
)

// newTestReader is a reader with o, closed at the test's end, with run-time
// stats held on (as an agent in always mode holds them) so that programs
// the test runs count their runs.
func newTestReader(t testing.TB, o Options) *Reader {
	t.Helper()
	st := stats.NewCtl(config.StatsAlways, 0, 0, time.Now)
	r := New(o)
	t.Cleanup(func() { r.Close(); st.Close() })
	return r
}

// snapshot is one read shaped as the agent's Snapshot has it (the programs
// as entries, the read's accounting as Scan), so that the reader's tests
// say what the agent's said of its scans.
type snapshot struct {
	Programs []*ProgramStat
	Scan     ScanStats
}

// scan reads once.
func scan(t testing.TB, r *Reader) *snapshot {
	t.Helper()
	v, st, err := r.ReadView(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &snapshot{Programs: make([]*ProgramStat, v.Len()), Scan: st}
	for i := range s.Programs {
		s.Programs[i] = &ProgramStat{Program: *v.At(i)}
	}
	return s
}

// findProg is the entry of program id in s, nil when s lacks it.
func findProg(s *snapshot, id uint32) *ProgramStat {
	for _, p := range s.Programs {
		if p.ID == id {
			return p
		}
	}
	return nil
}
