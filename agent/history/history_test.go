package history

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent"
)

func u64(v uint64) *uint64 { return &v }

// jsonOf is v as the API serves it: pointers compared by what they hold.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// snap builds scan n (1-based) at a 1s interval with the given programs.
func snap(n int, progs ...agent.ProgramStat) *agent.Snapshot {
	s := &agent.Snapshot{Seq: uint64(n), Time: t0.Add(time.Duration(n) * time.Second), Programs: make([]*agent.ProgramStat, len(progs))}
	for i := range progs {
		s.Programs[i] = &progs[i]
	}
	if n > 1 {
		s.Interval = time.Second
	}
	return s
}

func prog(id uint32, runs, rt, misses uint64) agent.ProgramStat {
	return agent.ProgramStat{
		Program: agent.Program{ID: id, Name: fmt.Sprint("p", id), MissKind: agent.MissKindRecursion, RecursionMisses: u64(misses * 10), RunCount: runs * 10, LoadTime: t0.Add(-time.Hour)},
		Delta:   agent.Rates{Runs: runs, RunTimeNs: rt, Misses: misses},
	}
}

func TestCapacity(t *testing.T) {
	for _, c := range []struct {
		window, interval time.Duration
		want             int
	}{
		{Window, time.Second, 300},
		{Window, 10 * time.Second, 30},
		{Window, 7 * time.Second, 43}, // rounded up: at least the window
		{Window, 100 * time.Millisecond, MaxPoints},
		{Window, 10 * time.Minute, 2},
		{Window, 0, MaxPoints},
	} {
		if got := Capacity(c.window, c.interval); got != c.want {
			t.Errorf("Capacity(%v, %v) = %d, want %d", c.window, c.interval, got, c.want)
		}
	}
}

func TestRecordPointsAndRates(t *testing.T) {
	s := New(3)
	s.Record(snap(1, prog(1, 0, 0, 0))) // first scan: no interval, no point
	if got, ok := s.Series(1); !ok || len(got.Points) != 0 {
		t.Fatalf("after the first scan: %+v %v, want a series with no points", got, ok)
	}
	for n := 2; n <= 6; n++ {
		s.Record(snap(n, prog(1, uint64(100*n), uint64(1000*n), uint64(n))))
	}
	got, _ := s.Series(1)
	if len(got.Points) != 3 {
		t.Fatalf("%d points, want capacity 3", len(got.Points))
	}
	for i, p := range got.Points {
		n := 4 + i // scans 4, 5, 6 survive, oldest first
		if !p.Time.Equal(t0.Add(time.Duration(n)*time.Second)) || p.Runs != uint64(100*n) || p.RecursionMisses == nil || *p.RecursionMisses != uint64(n) {
			t.Errorf("point %d = %+v, want scan %d", i, p, n)
		}
		if p.RunsPerSec != float64(100*n) || p.NsPerRun != 10 || p.CPUShare != float64(1000*n)/1e9 || p.RecursionMissesPerSec == nil || *p.RecursionMissesPerSec != float64(n) {
			t.Errorf("point %d rates = %+v", i, p)
		}
	}
	if got.RecursionMissesTotal == nil || *got.RecursionMissesTotal != 60 || got.RunCount != 6000 || !got.HasRecursionMisses || got.HasLinkMissed || got.MissKind != agent.MissKindRecursion {
		t.Errorf("series facts = %+v", got)
	}
}

func TestLinkMissedKeptApart(t *testing.T) {
	s := New(10)
	p := agent.ProgramStat{
		Program: agent.Program{ID: 7, Type: "kprobe", Links: []agent.Link{{ID: 1, Missed: u64(40)}, {ID: 2, Missed: u64(2)}, {ID: 3}}},
		Delta:   agent.Rates{Runs: 10, LinkMissed: 6},
	}
	s.Record(snap(1, p))
	s.Record(snap(2, p))
	got, _ := s.Series(7)
	if !got.HasLinkMissed || got.HasRecursionMisses || got.LinkMissedTotal != 42 || got.RecursionMissesTotal != nil {
		t.Errorf("series = %+v, want link missed 42 and no recursion counter", got)
	}
	if pt := got.Points[0]; pt.LinkMissed != 6 || pt.LinkMissedPerSec != 6 || pt.RecursionMisses != nil || pt.RecursionMissesPerSec != nil {
		t.Errorf("point = %+v", pt)
	}
	// Without the kernel's counter the API says absent, not 0.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"recursion_misses_total":null`, `"recursion_misses":null`, `"recursion_misses_per_sec":null`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("series JSON has no %s: %s", f, b)
		}
	}
}

// A program first seen but loaded before the previous scan has a zero
// delta that means "unmeasured"; one loaded since has a real one.
func TestNewProgramPoints(t *testing.T) {
	s := New(10)
	s.Record(snap(1))
	old := prog(1, 5, 5, 0)
	old.New, old.Delta = true, agent.Rates{}
	young := prog(2, 5, 50, 1)
	young.New, young.LoadTime = true, t0.Add(1500*time.Millisecond)
	s.Record(snap(2, old, young))
	if g, _ := s.Series(1); len(g.Points) != 0 {
		t.Errorf("old new program got points %+v", g.Points)
	}
	if g, _ := s.Series(2); len(g.Points) != 1 || g.Points[0].Runs != 5 {
		t.Errorf("young new program points = %+v, want its first delta", g.Points)
	}
}

func TestUnloadedLingersThenGoes(t *testing.T) {
	s := New(10)
	s.Record(snap(1, prog(1, 1, 1, 0), prog(2, 1, 1, 0)))
	s.Record(snap(2, prog(1, 1, 1, 0), prog(2, 1, 1, 0)))
	s.Record(snap(3, prog(1, 1, 1, 0)))
	g, ok := s.Series(2)
	if !ok || g.UnloadedAt == nil || !g.UnloadedAt.Equal(t0.Add(3*time.Second)) || len(g.Points) != 1 {
		t.Fatalf("unloaded program = %+v %v, want its point and unloaded at scan 3", g, ok)
	}
	if g, _ := s.Series(1); g.UnloadedAt != nil {
		t.Errorf("loaded program says unloaded at %v", g.UnloadedAt)
	}
	late := snap(4, prog(1, 1, 1, 0))
	late.Time = t0.Add(3*time.Second + Linger + time.Second)
	s.Record(late)
	if _, ok := s.Series(2); ok {
		t.Error("unloaded program still held after Linger")
	}
	if s.Len() != 1 {
		t.Errorf("store holds %d rings, want 1", s.Len())
	}
}

func TestUnloadedBounded(t *testing.T) {
	s := New(4)
	var progs []agent.ProgramStat
	for id := uint32(1); id <= MaxUnloaded+50; id++ {
		progs = append(progs, prog(id, 1, 1, 0))
	}
	s.Record(snap(1, progs...))
	s.Record(snap(2)) // all unloaded at once
	if s.Len() != MaxUnloaded {
		t.Errorf("store holds %d unloaded rings, want at most %d", s.Len(), MaxUnloaded)
	}
}

// A series is a copy: recording more never changes one handed out.
func TestSeriesIsACopy(t *testing.T) {
	s := New(2)
	s.Record(snap(1, prog(1, 1, 1, 0)))
	s.Record(snap(2, prog(1, 1, 1, 0)))
	s.Record(snap(3, prog(1, 2, 1, 0)))
	g, _ := s.Series(1)
	s.Record(snap(4, prog(1, 3, 1, 0)))
	s.Record(snap(5, prog(1, 4, 1, 0)))
	if g.Points[0].Runs != 1 || g.Points[1].Runs != 2 {
		t.Errorf("handed-out series changed: %+v", g.Points)
	}
}

// fill records capacity+1 scans of n programs into a new store and returns
// the heap bytes the store holds afterwards.
func fill(n, capacity int) (*Store, uint64) {
	progs := make([]agent.ProgramStat, n)
	for i := range progs {
		progs[i] = prog(uint32(i+1), 1000, 50000, 1)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(capacity)
	for k := 1; k <= capacity+1; k++ {
		s.Record(snap(k, progs...))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(progs) // the input's cost is not the store's
	return s, after.HeapAlloc - before.HeapAlloc
}

// TestMemoryAt1000Programs measures what full rings of 1,000 programs cost
// on the heap: the points themselves, rounded up to the allocator's size
// class (up to 1/7 more), plus a bounded per-ring overhead.
func TestMemoryAt1000Programs(t *testing.T) {
	const n = 1000
	if sz := unsafe.Sizeof(point{}); sz != 48 {
		t.Errorf("a stored point is %d bytes, the package doc says 48", sz)
	}
	for _, capacity := range []int{Capacity(Window, 10*time.Second), Capacity(Window, time.Second), MaxPoints} {
		s, used := fill(n, capacity)
		pts := uint64(n * capacity * 48)
		t.Logf("%d programs × %d points: %d bytes on the heap (%.1f MiB; points alone %d bytes, %d bytes/program)",
			n, capacity, used, float64(used)/(1<<20), pts, used/n)
		if limit := pts + pts/7 + n*512; used < pts || used > limit {
			t.Errorf("%d programs × %d points hold %d bytes, want between %d and %d", n, capacity, used, pts, limit)
		}
		runtime.KeepAlive(s)
	}
}

func BenchmarkRecord1000(b *testing.B) {
	progs := make([]agent.ProgramStat, 1000)
	for i := range progs {
		progs[i] = prog(uint32(i+1), 1000, 50000, 1)
	}
	s := New(300)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Record(snap(i+2, progs...))
	}
	_, used := fill(1000, 300)
	b.ReportMetric(float64(used), "heap-B/1000progs@300pts")
}

// TestSharedEntries records snapshots that hand an idle program's entry out
// again, as the agent does, into one store and fresh copies into another:
// every series must be the same.
func TestSharedEntries(t *testing.T) {
	shared, fresh := New(8), New(8)
	idle := prog(1, 0, 0, 0)
	busy := prog(2, 3, 300, 1)
	idleEntry := &idle
	for n := 1; n <= 12; n++ {
		s := snap(n)
		b := busy
		if n%3 == 0 { // busy ran this interval, idle did not; the others idle
			b = prog(2, uint64(n), 100*uint64(n), 0)
		} else {
			b.Delta = agent.Rates{}
		}
		s.Programs = []*agent.ProgramStat{idleEntry, &b}
		shared.Record(s)
		f := snap(n)
		i2, b2 := *idleEntry, b
		f.Programs = []*agent.ProgramStat{&i2, &b2}
		fresh.Record(f)
	}
	for _, id := range []uint32{1, 2} {
		a, _ := shared.Series(id)
		b, _ := fresh.Series(id)
		if ja, jb := jsonOf(t, a), jsonOf(t, b); ja != jb {
			t.Errorf("program %d: shared entries recorded\n%s\nfresh copies\n%s", id, ja, jb)
		}
		if len(a.Points) != 8 {
			t.Errorf("program %d: %d points, want a full ring of 8", id, len(a.Points))
		}
	}
}
