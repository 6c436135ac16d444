package progstats

import (
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func loadIter(tb testing.TB) *Iter {
	tb.Helper()
	n, err := PossibleCPUs()
	if err != nil {
		tb.Fatal(err)
	}
	it, err := Load(n)
	if errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(tb, expect.FeatProgStats, err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { it.Close() })
	return it
}

func socketFilter(tb testing.TB, name string) *ebpf.Program {
	tb.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		tb.Fatalf("loading %s: %v", name, err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func progID(tb testing.TB, p *ebpf.Program) uint32 {
	tb.Helper()
	info, err := p.Info()
	if err != nil {
		tb.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

// TestStatsEqualObjInfo checks, for every program in the kernel that was
// idle across the check, that the iterator's run count, run time and
// recursion misses equal what BPF_OBJ_GET_INFO_BY_FD says, and that the
// identity and static fields agree too. The canary provides genuine
// recursion misses and test runs provide run counts.
func TestStatsEqualObjInfo(t *testing.T) { testStatsEqualObjInfo(t, false) }

// TestCompactStatsEqualObjInfo is TestStatsEqualObjInfo for the
// steady-state pass: every program known (SetKnownMaxID), so every record
// is a stat_record read through ReadStats, and its counts must equal
// BPF_OBJ_GET_INFO_BY_FD's all the same, the canary's misses included.
func TestCompactStatsEqualObjInfo(t *testing.T) { testStatsEqualObjInfo(t, true) }

func testStatsEqualObjInfo(t *testing.T, compact bool) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Logf("BPF_ENABLE_STATS refused (%v): run times may stay zero", err)
	} else {
		defer stats.Close()
	}
	it := loadIter(t)
	c, canaryID := canarytest.Load(t)
	if err := c.Trigger(5); err != nil {
		t.Fatal(err)
	}
	sf := socketFilter(t, "ps_runs")
	for range 3 {
		if _, _, err := sf.Test(make([]byte, 14)); err != nil {
			t.Fatalf("test-running ps_runs: %v", err)
		}
	}
	sfID := progID(t, sf)

	read := it.Read
	if compact {
		all, err := it.Read(nil)
		if err != nil {
			t.Fatal(err)
		}
		known := all[len(all)-1].ID
		if err := it.SetKnownMaxID(known); err != nil {
			t.Fatal(err)
		}
		read = func([]Record) ([]Record, error) { return readCompact(t, it, known) }
	}
	first, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		info  *ebpf.ProgramInfo
		stats *ebpf.ProgramStats
	}
	refs := map[uint32]ref{}
	for _, r := range first {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(r.ID))
		if err != nil {
			continue // unloaded since the read
		}
		st, err := p.Stats() // one BPF_OBJ_GET_INFO_BY_FD
		if err != nil {
			t.Fatalf("prog %d stats: %v", r.ID, err)
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			t.Fatalf("prog %d info: %v", r.ID, err)
		}
		refs[r.ID] = ref{info, st}
	}
	second, err := read(nil)
	if err != nil {
		t.Fatal(err)
	}
	again := map[uint32]Record{}
	for _, r := range second {
		again[r.ID] = r
	}

	compared, withMisses := map[uint32]bool{}, 0
	for _, r := range first {
		ref, ok := refs[r.ID]
		r2, ok2 := again[r.ID]
		if !ok || !ok2 || !r.StatsKnown || r.RunCount != r2.RunCount || r.RunTimeNs != r2.RunTimeNs || r.Misses != r2.Misses {
			continue // gone or busy between the reads: not comparable
		}
		if r.StatsAddr == 0 {
			t.Errorf("prog %d %s: statistics summed but no stats address", r.ID, r.Name)
		}
		st := ref.stats
		if r.RunCount != st.RunCount || r.RunTimeNs != uint64(st.Runtime) {
			t.Errorf("prog %d %s: iterator runs %d time %d ns, obj info runs %d time %d ns", r.ID, r.Name, r.RunCount, r.RunTimeNs, st.RunCount, uint64(st.Runtime))
		}
		if r.Misses != st.RecursionMisses {
			t.Errorf("prog %d %s: iterator misses %d (known %v), obj info %d", r.ID, r.Name, r.Misses, r.MissesKnown, st.RecursionMisses)
		}
		if r.Misses > 0 {
			withMisses++
		}
		if !compact {
			checkStatic(t, r, ref.info)
		}
		compared[r.ID] = true
	}
	t.Logf("%d programs compared over %d CPUs, %d with recursion misses", len(compared), it.cpus, withMisses)
	if !compared[canaryID] || !compared[sfID] {
		t.Fatalf("the canary (%d) or ps_runs (%d) was not compared: %v", canaryID, sfID, compared)
	}
	for _, r := range first {
		if r.ID == canaryID && r.Misses == 0 {
			t.Errorf("the canary has no misses after 5 triggers")
		}
		if r.ID == sfID && r.RunCount != 3 {
			t.Errorf("ps_runs ran 3 times, iterator says %d", r.RunCount)
		}
	}
}

// readCompact is one ReadStats pass as Records (ID and statistics), after
// checking that every program up to known came as a stat_record and every
// later one whole.
func readCompact(t *testing.T, it *Iter, known uint32) ([]Record, error) {
	stats, whole, err := it.ReadStats(nil, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Record, len(stats))
	for i, st := range stats {
		if (st.Whole < 0) != (st.ID <= known) {
			t.Errorf("prog %d (known up to %d): whole record index %d", st.ID, known, st.Whole)
		}
		if st.Whole >= 0 && whole[st.Whole].ID != st.ID {
			t.Errorf("prog %d: whole record %d is prog %d's", st.ID, st.Whole, whole[st.Whole].ID)
		}
		out[i] = Record{ID: st.ID, StatsKnown: st.StatsKnown, RunCount: st.RunCount, RunTimeNs: st.RunTimeNs,
			MissesKnown: st.MissesKnown, Misses: st.Misses, StatsAddr: st.StatsAddr}
	}
	return out, nil
}

func checkStatic(t *testing.T, r Record, info *ebpf.ProgramInfo) {
	t.Helper()
	if info.Name != r.Name || info.Tag != hex.EncodeToString(r.Tag[:]) || uint32(info.Type) != r.Type {
		t.Errorf("prog %d: iterator name %q tag %x type %d, obj info %q %s %d", r.ID, r.Name, r.Tag, r.Type, info.Name, info.Tag, info.Type)
	}
	if lt, ok := info.LoadTime(); ok && uint64(lt) != r.LoadTime {
		t.Errorf("prog %d: load time %d vs %d", r.ID, r.LoadTime, lt)
	}
	if b, ok := info.BTFID(); ok && uint32(b) != r.BTFID {
		t.Errorf("prog %d: btf id %d vs %d", r.ID, r.BTFID, b)
	}
	if v, ok := info.VerifiedInstructions(); ok && (!r.VerifiedInsnsKnown || v != r.VerifiedInsns) {
		t.Errorf("prog %d: verified insns %d vs %d", r.ID, r.VerifiedInsns, v)
	}
	if x, ok := info.TranslatedSize(); ok == nil && uint32(x) != r.XlatedLen {
		t.Errorf("prog %d: xlated %d vs %d", r.ID, r.XlatedLen, x)
	}
	if !r.StaticKnown {
		return
	}
	if u, ok := info.CreatedByUID(); ok && u != r.UID {
		t.Errorf("prog %d: uid %d vs %d", r.ID, r.UID, u)
	}
	if ids, ok := info.MapIDs(); ok {
		if len(ids) != int(r.NrMapIDs) {
			t.Errorf("prog %d: %d map ids vs %d", r.ID, r.NrMapIDs, len(ids))
		} else {
			for i, id := range ids {
				if uint32(id) != r.MapIDs[i] {
					t.Errorf("prog %d: map ids %v vs %v", r.ID, r.MapIDs[:r.NrMapIDs], ids)
					break
				}
			}
		}
	}
	if j, ok := info.JitedSize(); ok == nil && uint32(j) != r.JitedLen {
		t.Errorf("prog %d: jited %d vs %d", r.ID, r.JitedLen, j)
	}
	if m, ok := info.Memlock(); ok && m != uint64(r.Pages)*uint64(pageSize) {
		t.Errorf("prog %d: memlock %d vs pages %d", r.ID, m, r.Pages)
	}
}

// TestReadWhileLoading reads while another goroutine loads and unloads
// programs: every read must succeed, list ids in ascending order, each once,
// and hold the programs that stayed loaded throughout.
func TestReadWhileLoading(t *testing.T) {
	it := loadIter(t)
	stay := progID(t, socketFilter(t, "ps_stay"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := socketFilter(t, "ps_churn")
			p.Close()
		}
	})
	var recs []Record
	deadline := time.Now().Add(time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		var err error
		if recs, err = it.Read(recs); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		reads++
		found := false
		for i, r := range recs {
			if i > 0 && r.ID <= recs[i-1].ID {
				t.Fatalf("ids out of order: %d after %d", r.ID, recs[i-1].ID)
			}
			found = found || r.ID == stay
		}
		if !found {
			t.Fatalf("program %d, loaded throughout, missing from a read", stay)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads while loading and unloading", reads)
}

func BenchmarkRead(b *testing.B) {
	it := loadIter(b)
	var recs []Record
	for b.Loop() {
		var err error
		if recs, err = it.Read(recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(recs)), "progs")
}

// TestLoadCache loads the iterator from kernel BTF (writing the CO-RE
// cache), then from the cache, then from a damaged cache: the second load
// must use the cache, the third must notice the damage and relocate again,
// and all three must read the same programs the same way.
func TestLoadCache(t *testing.T) {
	n, err := PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	loadIn := func(wantCached bool) (*Iter, LoadInfo, time.Duration) {
		t.Helper()
		t0 := time.Now()
		it, li, err := LoadCached(n, dir)
		d := time.Since(t0)
		if errors.Is(err, ebpf.ErrNotSupported) {
			expect.SkipUnlessExpected(t, expect.FeatProgStats, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { it.Close() })
		if li.Cached != wantCached {
			t.Fatalf("load cached=%v (cache error %v), want %v", li.Cached, li.CacheErr, wantCached)
		}
		return it, li, d
	}
	cold, li, dCold := loadIn(false)
	if li.CacheErr != nil || li.CachePath == "" {
		t.Fatalf("cold load wrote no cache: %v", li.CacheErr)
	}
	warm, _, dWarm := loadIn(true)
	t.Logf("load from kernel BTF %v, from the cache %v (%.2fx)", dCold, dWarm, float64(dWarm)/float64(dCold))

	// Damage the cache: one patch fewer than the program has relocations.
	c, err := coreload.ReadCache(li.CachePath, mustKey(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Patches = c.Patches[1:]
	if err := coreload.WriteCache(li.CachePath, c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadCached(n, dir); err != nil {
		t.Fatalf("a damaged cache must not fail the load: %v", err)
	}
	again, _, _ := loadIn(true) // the damaged entry was replaced

	a, _ := cold.Read(nil)
	b, _ := warm.Read(nil)
	d, _ := again.Read(nil)
	byID := func(rs []Record) map[uint32]Record {
		m := map[uint32]Record{}
		for _, r := range rs {
			m[r.ID] = r
		}
		return m
	}
	mb, md := byID(b), byID(d)
	for _, r := range a {
		for _, o := range []map[uint32]Record{mb, md} {
			x, ok := o[r.ID]
			if !ok {
				continue
			}
			if x.Name != r.Name || x.Tag != r.Tag || x.LoadTime != r.LoadTime || x.MapIDs != r.MapIDs || x.UID != r.UID || x.JitedLen != r.JitedLen || x.Pages != r.Pages || x.StatsKnown != r.StatsKnown {
				t.Errorf("prog %d read differently after a cached load: %+v vs %+v", r.ID, x, r)
			}
		}
	}
}

func mustKey(t *testing.T) string {
	k, err := kernelKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// BenchmarkLoadCached is the one-shot cost `bpfleet list` pays for the
// iterator: a load from the CO-RE cache, attach, first read, close.
func BenchmarkLoadCached(b *testing.B) {
	n, err := PossibleCPUs()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	it, _, err := LoadCached(n, dir)
	if err != nil {
		b.Skipf("kernel refuses the bpf_prog stats iterator: %v", err)
	}
	info, _ := it.prog.Info()
	if v, ok := info.VerifiedInstructions(); ok {
		b.ReportMetric(float64(v), "verified-insns")
	}
	it.Close()
	for b.Loop() {
		it, li, err := LoadCached(n, dir)
		if err != nil || !li.Cached {
			b.Fatal(err, li.CacheErr)
		}
		if _, err := it.Read(nil); err != nil {
			b.Fatal(err)
		}
		it.Close()
	}
}

// BenchmarkReadKnown is a steady-state pass over 1,000 more programs,
// every one known, so every record is a stat_record (ReadStats), timed
// against an empty iter/bpf_prog program's walk of the same programs in
// the same loop: x-walk is what our BPF program and decoding add to the
// kernel's own walk.
func BenchmarkReadKnown(b *testing.B) {
	for range 1000 {
		socketFilter(b, "ps_bench")
	}
	it := loadIter(b)
	recs, err := it.Read(nil)
	if err != nil || len(recs) == 0 {
		b.Fatal(err)
	}
	if err := it.SetKnownMaxID(recs[len(recs)-1].ID); err != nil {
		b.Fatal(err)
	}
	walk := emptyWalk(b)
	var stats []Stat
	var whole []Record
	var tRead, tWalk time.Duration
	for b.Loop() {
		t0 := time.Now()
		if stats, whole, err = it.ReadStats(stats, whole); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		walk()
		tWalk += time.Since(t1)
		tRead += t1.Sub(t0)
	}
	b.ReportMetric(float64(len(stats)), "progs")
	b.ReportMetric(float64(tRead.Nanoseconds())/float64(b.N)/float64(len(stats)), "ns/prog")
	b.ReportMetric(float64(tWalk.Nanoseconds())/float64(b.N)/float64(len(stats)), "walk-ns/prog")
	b.ReportMetric(float64(tRead)/float64(tWalk), "x-walk")
}

// emptyWalk loads an iter/bpf_prog program that writes nothing (mov r0,
// 0; exit) and returns a function that reads it to its end: the kernel's
// own cost of walking every program, the floor of any iterator design.
func emptyWalk(b *testing.B) func() {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceIter, AttachTo: "bpf_prog", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		b.Fatalf("loading the empty bpf_prog iterator: %v", err)
	}
	b.Cleanup(func() { prog.Close() })
	l, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		b.Fatalf("attaching the empty bpf_prog iterator: %v", err)
	}
	b.Cleanup(func() { l.Close() })
	buf := make([]byte, 4096)
	return func() {
		rd, err := l.Open()
		if err != nil {
			b.Fatal(err)
		}
		for {
			if n, err := rd.Read(buf); n == 0 || err != nil {
				break
			}
		}
		rd.Close()
	}
}

// TestReadStatsNewIDs checks the steady-state pass where a program appears:
// the programs up to the known id come as stat_records, the new one whole
// (its name read), and Read gives the same ids as ReadStats.
func TestReadStatsNewIDs(t *testing.T) {
	it := loadIter(t)
	all, err := it.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	known := all[len(all)-1].ID
	if err := it.SetKnownMaxID(known); err != nil {
		t.Fatal(err)
	}
	sf := socketFilter(t, "ps_new")
	id := progID(t, sf)
	stats, whole, err := it.ReadStats(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range stats {
		if st.ID <= known {
			if st.Whole >= 0 {
				t.Errorf("prog %d, known, came whole", st.ID)
			}
			continue
		}
		if st.Whole < 0 {
			t.Errorf("prog %d, above the known %d, came without its whole record", st.ID, known)
			continue
		}
		r := whole[st.Whole]
		if r.ID != st.ID || !r.Whole || r.RunCount != st.RunCount {
			t.Errorf("prog %d: whole record %+v does not match its stat %+v", st.ID, r, st)
		}
		if st.ID == id {
			found = true
			if r.Name != "ps_new" || !r.StaticKnown || !st.StatsKnown {
				t.Errorf("the new program's record: name %q static %v stats %v", r.Name, r.StaticKnown, st.StatsKnown)
			}
		}
	}
	if !found {
		t.Fatalf("the program loaded after SetKnownMaxID (%d) is not in the pass", id)
	}
	recs, err := it.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Whole != (r.ID > known) {
			t.Errorf("Read: prog %d (known up to %d) whole %v", r.ID, known, r.Whole)
		}
	}
}
