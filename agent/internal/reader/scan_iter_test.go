package reader

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// iterReader is a reader whose scan source is the iterator, or a skip with
// the reason the kernel gave.
func iterReader(t *testing.T) *Reader {
	t.Helper()
	a := newTestReader(t, Options{})
	if a.iter == nil {
		t.Skipf("scan source is syscall on this kernel: %s", a.fallback)
	}
	return a
}

// manyMaps loads a socket filter that references n maps: more than an
// iterator record holds, so its static part must come from a syscall.
func manyMaps(t *testing.T, n int) *ebpf.Program {
	t.Helper()
	var insns asm.Instructions
	for i := range n {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		insns = append(insns, asm.LoadMapPtr(asm.R1, m.FD()).WithSymbol(fmt.Sprint("m", i)))
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "many_maps", Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestIteratorMatchesSyscall scans with the iterator, then by syscall, then
// with the iterator again: every program idle across the three (same
// counters in both iterator scans) must read the same in both sources,
// counters (the canary's genuine misses included), identity, sizes, map ids
// and memlock. Ids in one source and not the other are programs loaded or
// unloaded in between (each reader's own iterator among them) and are only
// counted.
func TestIteratorMatchesSyscall(t *testing.T) {
	it := iterReader(t)
	sys := newTestReader(t, Options{NoIterator: true})
	c, canaryID := canarytest.Load(t)
	if err := c.Trigger(3); err != nil {
		t.Fatal(err)
	}
	many := scantest.ProgID(t, manyMaps(t, progstats.MaxMapIDs+1))
	scantest.LoadPrograms(t, 5)

	a := scan(t, it)
	b := scan(t, sys)
	a2 := scan(t, it)
	if a.Scan.Source != ScanSourceIterator || a.Scan.FallbackReason != "" {
		t.Fatalf("iterator reader reports source %q (%q)", a.Scan.Source, a.Scan.FallbackReason)
	}
	if b.Scan.Source != ScanSourceSyscall || b.Scan.FallbackReason == "" {
		t.Fatalf("syscall reader reports source %q without a reason (%q)", b.Scan.Source, b.Scan.FallbackReason)
	}
	byID := func(s *snapshot) map[uint32]*Program {
		m := map[uint32]*Program{}
		for i := range s.Programs {
			m[s.Programs[i].ID] = &s.Programs[i].Program
		}
		return m
	}
	// a2 is the steady-state scan (records of known ids carry only the
	// counters; the rest comes from the reader's cache): that is the one
	// compared, a only tells idle programs.
	sb, sa := byID(b), byID(a)
	compared, onlyOne := 0, 0
	seen := map[uint32]bool{}
	for i := range a2.Programs {
		p := &a2.Programs[i].Program
		q, inSys := sb[p.ID]
		p2, again := sa[p.ID]
		if !inSys || !again {
			onlyOne++
			continue
		}
		if p2.RunCount != p.RunCount || p2.RunTimeNs != p.RunTimeNs || !reflect.DeepEqual(p2.RecursionMisses, p.RecursionMisses) {
			continue // ran between the scans
		}
		want := *q
		got := *p
		if want.Sleepable == nil || got.Sleepable == nil { // the syscall reader loads its facts iterator only when needed
			want.Sleepable, got.Sleepable = nil, nil
			want.MissKind, got.MissKind = "", ""
		}
		want.Owners, got.Owners = nil, nil
		// Both turn the same load_time (ns since boot) into wall time
		// against a boot time each reader computes from its own clock
		// reads: they may differ by the time between those reads.
		if d := got.LoadTime.Sub(want.LoadTime); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("prog %d: load time %v vs %v", p.ID, got.LoadTime, want.LoadTime)
		}
		want.LoadTime, got.LoadTime = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("prog %d (%s) differs:\niterator %+v\nsyscall  %+v", p.ID, p.Name, got, want)
		}
		compared++
		seen[p.ID] = true
	}
	for id := range sb {
		if _, ok := byID(a2)[id]; !ok {
			onlyOne++
		}
	}
	t.Logf("%d programs compared, %d in one source only", compared, onlyOne)
	if !seen[canaryID] || !seen[many] {
		t.Fatalf("the canary (%d) or the %d-map program (%d) was not compared", canaryID, progstats.MaxMapIDs+1, many)
	}
	if m := findProg(a2, canaryID).RecursionMisses; m == nil || *m != 3 {
		t.Errorf("canary misses %v, want 3", m)
	}
	if n := len(findProg(a2, many).MapIDs); n != progstats.MaxMapIDs+1 {
		t.Errorf("the %d-map program has %d map ids", progstats.MaxMapIDs+1, n)
	}
}

// TestIteratorFailsHalfway: the iterator stops working after the reader
// chose it (here: its link and program are closed under it). The next
// scan must not be half a snapshot: it is read by syscall, says why, and
// still has the canary's exact count; later scans stay on syscall.
func TestIteratorFailsHalfway(t *testing.T) {
	a := iterReader(t)
	c, canaryID := canarytest.Load(t)
	if err := c.Trigger(2); err != nil {
		t.Fatal(err)
	}
	if s := scan(t, a); s.Scan.Source != ScanSourceIterator {
		t.Fatalf("first scan from %s", s.Scan.Source)
	}
	a.iter.Close()
	s := scan(t, a)
	if s.Scan.Source != ScanSourceSyscall || !strings.Contains(s.Scan.FallbackReason, "iterator read failed") {
		t.Fatalf("after the iterator broke: source %q, reason %q", s.Scan.Source, s.Scan.FallbackReason)
	}
	p := findProg(s, canaryID)
	if p == nil || p.RecursionMisses == nil || *p.RecursionMisses != 2 {
		t.Fatalf("canary after the fallback: %+v", p)
	}
	if s := scan(t, a); s.Scan.Source != ScanSourceSyscall {
		t.Fatalf("a later scan went back to %s", s.Scan.Source)
	}
}

// unreadable wraps the real iterator as a kernel whose probe reads fail
// at run time would: every record without its sums or static fields.
type unreadable struct{ statsIter }

func (u unreadable) ReadStats(stats []progstats.Stat, whole []progstats.Record) ([]progstats.Stat, []progstats.Record, error) {
	stats, whole, err := u.statsIter.ReadStats(stats, whole)
	for i := range stats {
		stats[i].StatsKnown, stats[i].RunCount, stats[i].RunTimeNs = false, 0, 0
	}
	for i := range whole {
		whole[i].StatsKnown, whole[i].StaticKnown, whole[i].RunCount, whole[i].RunTimeNs = false, false, 0, 0
	}
	return stats, whole, err
}

func (u unreadable) ReadEach(fn func(*progstats.Record)) error {
	return u.statsIter.ReadEach(func(r *progstats.Record) {
		r.StatsKnown, r.StaticKnown, r.RunCount, r.RunTimeNs = false, false, 0, 0
		fn(r)
	})
}

// TestIteratorCheckRefuses: an iterator that loads but cannot read the
// per-CPU stats is refused on its first read, with a reason, before any of
// that read is used; a record without sums in a later scan is read by
// syscall instead of reported as zero.
func TestIteratorCheckRefuses(t *testing.T) {
	a := iterReader(t)
	err := checkStatsIter(unreadable{a.iter})
	if err == nil || !strings.Contains(err.Error(), "per-CPU") {
		t.Fatalf("check of an iterator without sums: %v", err)
	}
	sf := scantest.LoadPrograms(t, 1)[0]
	for range 4 {
		if _, _, err := sf.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	// A kernel like that on the first scan: refused, with the reason.
	b := iterReader(t)
	b.iter = unreadable{b.iter}
	if s := scan(t, b); s.Scan.Source != ScanSourceSyscall || !strings.Contains(s.Scan.FallbackReason, "per-CPU") {
		t.Fatalf("first read without sums: source %q, reason %q", s.Scan.Source, s.Scan.FallbackReason)
	}
	if p := findProg(scan(t, b), scantest.ProgID(t, sf)); p == nil || p.RunCount != 4 {
		t.Fatalf("after the refusal the program reads %+v, want 4 runs", p)
	}

	// After a good first read: records without sums are read by syscall.
	scan(t, a)
	a.iter = unreadable{a.iter}
	s := scan(t, a)
	if s.Scan.Source != ScanSourceIterator {
		t.Fatalf("source %s after a checked first read", s.Scan.Source)
	}
	p := findProg(s, scantest.ProgID(t, sf))
	if p == nil || p.RunCount != 4 || p.Memlock == nil {
		t.Fatalf("program without iterator sums read as %+v, want 4 runs from a syscall", p)
	}
}

// TestOneShotCheckRefuses: a one-shot reader's first read is checked as
// readIter's is: an iterator that cannot read per-CPU stats is refused
// with the reason, and the scan is the syscall scan's.
func TestOneShotCheckRefuses(t *testing.T) {
	// Stats on (held by newTestReader) before the program runs.
	a := newTestReader(t, Options{OneShot: true, ScanSource: ScanSourceIterator, BPFFS: []string{t.TempDir()}, Parallel: 2})
	if a.iter == nil {
		t.Skipf("scan source is syscall on this kernel: %s", a.fallback)
	}
	sf := scantest.LoadPrograms(t, 1)[0]
	for range 4 {
		if _, _, err := sf.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	a.iter = unreadable{a.iter}
	s := scan(t, a)
	if s.Scan.Source != ScanSourceSyscall || !strings.Contains(s.Scan.FallbackReason, "per-CPU") {
		t.Fatalf("one-shot first read without sums: source %q, reason %q", s.Scan.Source, s.Scan.FallbackReason)
	}
	if p := findProg(s, scantest.ProgID(t, sf)); p == nil || p.RunCount != 4 {
		t.Fatalf("after the refusal the program reads %+v, want 4 runs", p)
	}
}

// TestIteratorScanWhileLoading scans while another goroutine loads and
// unloads programs: no scan may fail or count an error, and a program
// loaded throughout keeps its exact run count in every snapshot.
func TestIteratorScanWhileLoading(t *testing.T) {
	a := iterReader(t)
	stay := scantest.LoadPrograms(t, 1)[0]
	for range 3 {
		if _, _, err := stay.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	id := scantest.ProgID(t, stay)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	spec := scantest.SocketFilterSpec()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if p, err := ebpf.NewProgram(spec); err == nil {
				p.Close()
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(time.Second)
	scans := 0
	for time.Now().Before(deadline) {
		s := scan(t, a)
		scans++
		if s.Scan.Errors != 0 || s.Scan.Source != ScanSourceIterator {
			t.Fatalf("scan %d: source %s, errors %v", scans, s.Scan.Source, s.Scan.ErrorMsgs)
		}
		if p := findProg(s, id); p == nil || p.RunCount != 3 {
			t.Fatalf("scan %d: the program loaded throughout reads %+v", scans, p)
		}
	}
	t.Logf("%d scans while loading and unloading", scans)
}

func TestFallbackReason(t *testing.T) {
	for _, c := range []struct {
		err    error
		target string
		want   string
	}{
		{fmt.Errorf("%w: verifier rejected the iterator: invalid argument: unknown func bpf_map_lookup_percpu_elem#195", ebpf.ErrNotSupported), "bpf_prog", "kernel lacks bpf_map_lookup_percpu_elem (Linux 5.19+): "},
		{fmt.Errorf("%w: kernel BTF has no bpf_prog iterator target: not found", ebpf.ErrNotSupported), "bpf_prog", "kernel has no iter/bpf_prog (Linux 5.9+): "},
		{fmt.Errorf("%w: kernel BTF has no bpf_link iterator target: not found", ebpf.ErrNotSupported), "bpf_link", "kernel has no iter/bpf_link (Linux 5.19+): "},
		{fmt.Errorf("%w: verifier rejected the iterator: unknown func bpf_probe_read_kernel#113", ebpf.ErrNotSupported), "bpf_prog", "kernel refuses bpf_probe_read_kernel"},
		{fmt.Errorf("%w: verifier rejected the iterator: unknown func bpf_probe_read_kernel#113", ebpf.ErrNotSupported), "bpf_link", "kernel refuses bpf_probe_read_kernel"},
		{fmt.Errorf("%w: verifier rejected the iterator: invalid argument", ebpf.ErrNotSupported), "bpf_link", "kernel refuses the bpf_link iterator: "},
		{errors.New("operation not permitted"), "bpf_prog", "operation not permitted"},
		{errors.New("reading kernel build id: permission denied"), "bpf_link", "reading kernel build id"},
	} {
		if got := fallbackReason(c.err, c.target); !strings.HasPrefix(got, c.want) {
			t.Errorf("fallbackReason(%v, %s) = %q, want prefix %q", c.err, c.target, got, c.want)
		}
	}
}

// withoutStats wraps the real iterator as a kernel that could not sum one
// program's per-CPU stats would.
type withoutStats struct {
	statsIter
	id uint32
}

func (w withoutStats) ReadStats(stats []progstats.Stat, whole []progstats.Record) ([]progstats.Stat, []progstats.Record, error) {
	stats, whole, err := w.statsIter.ReadStats(stats, whole)
	for i := range stats {
		if stats[i].ID == w.id {
			stats[i].StatsKnown, stats[i].RunCount, stats[i].RunTimeNs = false, 0, 0
		}
	}
	return stats, whole, err
}

func (w withoutStats) ReadEach(fn func(*progstats.Record)) error {
	return w.statsIter.ReadEach(func(r *progstats.Record) {
		if r.ID == w.id {
			r.StatsKnown, r.RunCount, r.RunTimeNs = false, 0, 0
		}
		fn(r)
	})
}

// TestOneShotScanEqualsCached: the read of a one-shot reader (readIterOnce:
// nothing cached, values from a slab) gives every program exactly what
// a long-running reader's first iterator read (readIter) gives, links,
// facts, map ids and miss kinds included; a program whose record lacks its
// sums, or has more maps than a record holds, is read by syscall there too.
// Its room for programs and slab chunks are made small here, so that the
// slices grow and the slab takes new chunks as on a node with thousands.
func TestOneShotScanEqualsCached(t *testing.T) {
	defer func(c, s int) { oneShotCap, slabChunk = c, s }(oneShotCap, slabChunk)
	oneShotCap, slabChunk = 2, 3
	sf := scantest.LoadPrograms(t, 3)
	mm := manyMaps(t, progstats.MaxMapIDs+1)
	one := New(Options{OneShot: true, ScanSource: ScanSourceIterator, BPFFS: []string{t.TempDir()}, Parallel: 2})
	defer one.Close()
	if one.iter == nil {
		t.Skipf("scan source is syscall on this kernel: %s", one.fallback)
	}
	noSums := scantest.ProgID(t, sf[0])
	one.iter = withoutStats{one.iter, noSums}
	cached := iterReader(t)
	ours := map[uint32]bool{scantest.ProgID(t, mm): true, one.iter.ProgramID(): true, cached.iter.ProgramID(): true}
	for _, p := range sf {
		ours[scantest.ProgID(t, p)] = true
	}
	s1, s2 := scan(t, one), scan(t, cached)
	if s1.Scan.Source != ScanSourceIterator || s2.Scan.Source != ScanSourceIterator {
		t.Fatalf("sources: one-shot %s (%s), cached %s", s1.Scan.Source, s1.Scan.FallbackReason, s2.Scan.Source)
	}
	if len(one.progs) != 0 || one.order != nil {
		t.Errorf("the one-shot scan cached %d programs (order %d)", len(one.progs), len(one.order))
	}
	compared := 0
	for i := range s2.Programs {
		q := s2.Programs[i].Program
		pp := findProg(s1, q.ID)
		if pp == nil {
			if ours[q.ID] {
				t.Errorf("program %d missing from the one-shot scan", q.ID)
			}
			continue // another test's program, loaded between the scans
		}
		p := pp.Program
		if d := p.LoadTime.Sub(q.LoadTime); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("program %d: load time %v one-shot, %v cached", p.ID, p.LoadTime, q.LoadTime)
		}
		p.LoadTime, q.LoadTime = time.Time{}, time.Time{}
		if !ours[p.ID] || p.ID == one.iter.ProgramID() || p.ID == cached.iter.ProgramID() {
			// Not idle between the two scans (the iterators ran).
			p.RunCount, p.RunTimeNs, p.RecursionMisses = 0, 0, nil
			q.RunCount, q.RunTimeNs, q.RecursionMisses = 0, 0, nil
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("program %d:\none-shot %+v\ncached   %+v", p.ID, p, q)
		}
		if ours[p.ID] {
			compared++
		}
	}
	if compared != len(ours) {
		t.Errorf("compared %d of the test's %d programs", compared, len(ours))
	}
	// A later scan of the same one-shot reader is a whole read again.
	s3 := scan(t, one)
	if findProg(s3, noSums) == nil || findProg(s3, scantest.ProgID(t, mm)) == nil {
		t.Errorf("second one-shot scan lost programs: %d listed", len(s3.Programs))
	}
}
