package reader

import (
	"context"
	"errors"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/linkstats"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// makeRawTPLinks attaches n raw_tp links of one no-op program to a
// tracepoint that hardly ever fires, and one perf_event tracepoint link
// and one iter link when n > 0.
func makeRawTPLinks(tb testing.TB, n int) {
	tb.Helper()
	load := func(typ ebpf.ProgramType, at ebpf.AttachType, to string) *ebpf.Program {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: typ, AttachType: at, AttachTo: to, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			tb.Fatalf("loading %v program: %v", typ, err)
		}
		tb.Cleanup(func() { p.Close() })
		return p
	}
	raw := load(ebpf.RawTracepoint, 0, "")
	var ls []link.Link
	tb.Cleanup(func() {
		for _, l := range ls {
			l.Close()
		}
	})
	for range n {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_hang", Program: raw})
		if err != nil {
			tb.Fatalf("raw_tp link %d of %d: %v", len(ls), n, err)
		}
		ls = append(ls, l)
	}
	if l, err := link.Tracepoint("sched", "sched_process_hang", load(ebpf.TracePoint, 0, ""), nil); err == nil {
		ls = append(ls, l)
	} else {
		tb.Logf("no perf_event tracepoint link: %v", err)
	}
	if l, err := link.AttachIter(link.IterOptions{Program: load(ebpf.Tracing, ebpf.AttachTraceIter, "bpf_map")}); err == nil {
		ls = append(ls, l)
	} else {
		tb.Logf("no iter link: %v", err)
	}
}

// linkReader is an iterator-source reader whose links come from the
// bpf_link iterator, or a skip with the kernel's reason.
func linkReader(t *testing.T) *Reader {
	t.Helper()
	a := iterReader(t)
	s := scan(t, a)
	if s.Scan.LinksSource != ScanSourceIterator {
		t.Skipf("links are read by syscall on this kernel: %s", s.Scan.LinksFallbackReason)
	}
	return a
}

// TestLinksIteratorMatchesSyscall reads every link with the bpf_link
// iterator, by syscall, and with the iterator again: every link present in
// all three reads (links come and go with other processes) must be the same
// Link in both sources — type, attach type, target, program, and missed.
func TestLinksIteratorMatchesSyscall(t *testing.T) {
	makeRawTPLinks(t, 3)
	a := linkReader(t)
	sys := newTestReader(t, Options{NoIterator: true})
	read := func(r *Reader) map[uint32]Link {
		var st ScanStats
		r.seq++
		ls, err := r.readLinks(&st)
		if err != nil {
			t.Fatal(err)
		}
		m := map[uint32]Link{}
		for _, l := range ls {
			m[l.ID] = l
		}
		return m
	}
	// The first iterator read decodes every link afresh: with every record
	// whole it must not make a single bpf() call.
	clear(a.links)
	a.lsrc.knownMax = 0
	c0 := bpfsys.SyscallCount.Load()
	it1 := read(a)
	calls := bpfsys.SyscallCount.Load() - c0
	whole := true
	for _, r := range a.lsrc.recs {
		whole = whole && r.Known && r.Whole
	}
	if whole && calls != 0 {
		t.Errorf("iterator read of %d whole links made %d bpf() calls", len(it1), calls)
	}
	sc, it2 := read(sys), read(a)
	same, only := 0, 0
	for id, l := range it1 {
		s, ok1 := sc[id]
		l2, ok2 := it2[id]
		if !ok1 || !ok2 {
			only++
			continue
		}
		if !reflect.DeepEqual(l, l2) {
			continue // a kprobe link that missed in between: not idle
		}
		if !reflect.DeepEqual(l, s) {
			t.Errorf("link %d: iterator %+v, syscall %+v", id, l, s)
		}
		same++
	}
	t.Logf("%d links equal in both sources, %d came or went", same, only)
	if same < 5 {
		t.Fatalf("only %d links compared; the test made 5", same)
	}
	b := scan(t, sys)
	if b.Scan.LinksSource != ScanSourceSyscall || b.Scan.LinksFallbackReason == "" {
		t.Fatalf("syscall reader: links source %q, reason %q", b.Scan.LinksSource, b.Scan.LinksFallbackReason)
	}
}

// failing wraps the real link iterator as a kernel whose reads start to
// fail after the first.
type failing struct {
	linkIter
	reads int
}

func (f *failing) Read(dst []linkstats.Record) ([]linkstats.Record, error) {
	if f.reads++; f.reads > 1 {
		return dst[:0], errors.New("read failed")
	}
	return f.linkIter.Read(dst)
}

// TestLinksIteratorFailsHalfway: a link iterator whose read fails leaves
// for good; that scan's links are read by syscall and complete.
func TestLinksIteratorFailsHalfway(t *testing.T) {
	makeRawTPLinks(t, 2)
	a := iterReader(t)
	a.lsrc.load = func() (linkIter, error) {
		it, err := a.loadLinkIter()
		if err != nil {
			return nil, err
		}
		return &failing{linkIter: it}, nil
	}
	s1 := scan(t, a)
	if s1.Scan.LinksSource != ScanSourceIterator {
		t.Skipf("links are read by syscall on this kernel: %s", s1.Scan.LinksFallbackReason)
	}
	s2 := scan(t, a)
	if s2.Scan.LinksSource != ScanSourceSyscall || !strings.Contains(s2.Scan.LinksFallbackReason, "read failed") {
		t.Fatalf("after a failed read: links source %q, reason %q", s2.Scan.LinksSource, s2.Scan.LinksFallbackReason)
	}
	if s2.Scan.Links < s1.Scan.Links-1 { // the link iterator's own link is gone
		t.Fatalf("after the fallback %d links, before %d", s2.Scan.Links, s1.Scan.Links)
	}
	if s3 := scan(t, a); s3.Scan.LinksSource != ScanSourceSyscall {
		t.Fatalf("a later scan went back to %s", s3.Scan.LinksSource)
	}
}

// TestLinkRecordCheck: the first read must hold the iterator's own link,
// read whole as an iter link on bpf_link.
func TestLinkRecordCheck(t *testing.T) {
	own := linkstats.Record{ID: 9, Type: bpfsys.LinkTypeIter, ProgID: 7, Known: true, Name: "bpf_link"}
	for _, tc := range []struct {
		name string
		recs []linkstats.Record
		ok   bool
	}{
		{"own link whole", []linkstats.Record{{ID: 1, ProgID: 3}, own}, true},
		{"own link missing", []linkstats.Record{{ID: 1, ProgID: 3}}, false},
		{"own link unread", []linkstats.Record{func() linkstats.Record { r := own; r.Known = false; return r }()}, false},
		{"own link misnamed", []linkstats.Record{func() linkstats.Record { r := own; r.Name = ""; return r }()}, false},
	} {
		err := checkLinkRecords(7, tc.recs)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// BenchmarkLinks reads 200+ links in a steady-state scan with the bpf_link
// iterator and by syscall (one GET_NEXT_ID per known link) alternately in
// every iteration, and, as a first read does, with an empty cache
// (GET_NEXT_ID, GET_FD_BY_ID, OBJ_GET_INFO, a name read, close per link).
// x-syscall is the iterator's time over the syscall path's.
func BenchmarkLinks(b *testing.B) {
	makeRawTPLinks(b, 200)
	a := New(Options{})
	defer a.Close()
	if _, _, err := a.ReadView(time.Now()); err != nil {
		b.Fatal(err)
	}
	if a.lsrc.iter == nil {
		b.Skipf("links are read by syscall on this kernel: %s", a.lsrc.fallback)
	}
	for _, first := range []bool{false, true} {
		name := "steady"
		if first {
			name = "first"
		}
		b.Run(name, func(b *testing.B) {
			sys := newReader()
			var tIt, tSys time.Duration
			var calls uint64
			n := 0
			var st ScanStats
			for b.Loop() {
				if first {
					clear(a.links)
					a.lsrc.knownMax = 0
					sys.links = map[uint32]*linkStatic{}
				}
				t0 := time.Now()
				a.seq++
				ls, err := a.readLinks(&st)
				t1 := time.Now()
				src := st.LinksSource
				c0 := bpfsys.SyscallCount.Load()
				sys.seq++
				if _, err := sys.readLinks(&st); err != nil {
					b.Fatal(err)
				}
				calls += bpfsys.SyscallCount.Load() - c0
				tSys += time.Since(t1)
				tIt += t1.Sub(t0)
				if err != nil || src != ScanSourceIterator {
					b.Fatalf("iterator read: %v (%s)", err, a.lsrc.fallback)
				}
				n = len(ls)
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(n) }
			b.ReportMetric(float64(n), "links")
			b.ReportMetric(per(tIt), "iter-ns/link")
			b.ReportMetric(per(tSys), "syscall-ns/link")
			b.ReportMetric(float64(tIt)/float64(tSys), "x-syscall")
			b.ReportMetric(float64(calls)/float64(b.N)/float64(n), "syscalls/link")
		})
	}
}

// TestLinksIteratorChurn creates and closes raw_tp links while a reader
// reads links from the iterator: every scan must list links whole (type,
// attach type, program, target) with no errors, a link settled late below
// the known id included (it is read by syscall).
func TestLinksIteratorChurn(t *testing.T) {
	a := linkReader(t)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		for ctx.Err() == nil {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: p})
			if errors.Is(err, os.ErrExist) {
				// 6.1 releases a raw_tp link after close returns: the
				// tracepoint still holds the program for a moment.
				runtime.Gosched()
				continue
			}
			if err != nil {
				t.Errorf("attaching raw_tp link: %v", err)
				break
			}
			l.Close()
			n++
		}
		done <- n
	}()
	scans, seen := 0, 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		s := scan(t, a)
		scans++
		if s.Scan.LinksSource != ScanSourceIterator || s.Scan.Errors > 0 {
			t.Errorf("scan %d: links source %q (%s), %d errors %v", scans, s.Scan.LinksSource, s.Scan.LinksFallbackReason, s.Scan.Errors, s.Scan.ErrorMsgs)
			break
		}
		for _, ps := range s.Programs {
			for _, l := range ps.Links {
				if l.ProgID != ps.ID || l.Type == "" || l.AttachType == "" {
					t.Errorf("scan %d: link %+v of program %d", scans, l, ps.ID)
				}
				if ps.ID == scantest.ProgID(t, p) {
					seen++
					if l.Target != "task_rename" {
						t.Errorf("scan %d: churned link %+v", scans, l)
					}
				}
			}
		}
	}
	cancel()
	t.Logf("%d scans while %d links came and went; %d of them seen", scans, <-done, seen)
}

// TestLinksOneShot: a one-shot scan reading programs from a bpf_prog
// iterator (a running agent's pin, or one it loaded from the CO-RE cache)
// reads links by syscall, and says why.
func TestLinksOneShot(t *testing.T) {
	for _, pin := range []string{"/sys/fs/bpf/pinned-by-an-agent", ""} { // what openPinnedStatsIter sets
		a := iterReader(t)
		a.oneShot, a.pin = true, pin
		s := scan(t, a)
		if s.Scan.LinksSource != ScanSourceSyscall || !strings.Contains(s.Scan.LinksFallbackReason, "one scan") || a.lsrc.iter != nil {
			t.Fatalf("pin %q: links source %q (%q), iterator loaded %v", pin, s.Scan.LinksSource, s.Scan.LinksFallbackReason, a.lsrc.iter != nil)
		}
	}
}
