package bpfevents

import (
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// rec builds a record as the kernel writes it.
func rec(typ uint32, body ...byte) []byte {
	b := make([]byte, headerSize, headerSize+len(body))
	binary.LittleEndian.PutUint32(b, typ)
	binary.LittleEndian.PutUint16(b[6:], uint16(headerSize+len(body)))
	return append(b, body...)
}

func bpfRec(kind Kind, id uint32) []byte {
	body := make([]byte, 16)
	binary.LittleEndian.PutUint16(body, uint16(kind))
	binary.LittleEndian.PutUint32(body[4:], id)
	for i := range 8 {
		body[8+i] = byte(id) + byte(i)
	}
	return rec(recordBPFEvent, body...)
}

func lostRec() []byte { return rec(recordLost, make([]byte, 16)...) }

// put writes recs into a ring of size bytes from byte counter start, as
// the kernel does (wrapping at the end), and returns the ring and head.
func put(size int, start uint64, recs ...[]byte) ([]byte, uint64) {
	data := make([]byte, size)
	pos := start
	for _, r := range recs {
		for _, c := range r {
			data[pos%uint64(size)] = c
			pos++
		}
	}
	return data, pos
}

func tagOf(id uint32) (t [8]byte) {
	for i := range t {
		t[i] = byte(id) + byte(i)
	}
	return t
}

// TestParse decodes rings of records, wrapped at every position.
func TestParse(t *testing.T) {
	cases := []struct {
		name string
		recs [][]byte
		want []Event
		lost bool
	}{
		{name: "empty"},
		{name: "load unload", recs: [][]byte{bpfRec(Load, 7), bpfRec(Unload, 7), bpfRec(Load, 9)},
			want: []Event{{Load, 7, tagOf(7)}, {Unload, 7, tagOf(7)}, {Load, 9, tagOf(9)}}},
		{name: "lost", recs: [][]byte{bpfRec(Load, 7), lostRec(), bpfRec(Unload, 3)},
			want: []Event{{Load, 7, tagOf(7)}, {Unload, 3, tagOf(3)}}, lost: true},
		{name: "other record skipped", recs: [][]byte{rec(3, make([]byte, 12)...), bpfRec(Unload, 4)},
			want: []Event{{Unload, 4, tagOf(4)}}},
		{name: "unknown bpf event kind skipped", recs: [][]byte{bpfRec(0, 1), bpfRec(Load, 2)},
			want: []Event{{Load, 2, tagOf(2)}}},
		{name: "full ring", recs: [][]byte{bpfRec(Load, 1), bpfRec(Load, 2), bpfRec(Load, 3), bpfRec(Load, 4), bpfRec(Load, 5)},
			want: []Event{{Load, 1, tagOf(1)}, {Load, 2, tagOf(2)}, {Load, 3, tagOf(3)}, {Load, 4, tagOf(4)}, {Load, 5, tagOf(5)}}, lost: true},
		{name: "zero size record", recs: [][]byte{make([]byte, headerSize)}, lost: true},
		{name: "short bpf record", recs: [][]byte{rec(recordBPFEvent, 1, 0, 0, 0)}, lost: true},
		{name: "record past head", recs: [][]byte{bpfRec(Load, 1)[:20]}, lost: true},
	}
	const size = 128
	for _, c := range cases {
		for start := uint64(0); start < 2*size; start++ {
			data, head := put(size, start, c.recs...)
			if head-start > size {
				continue
			}
			got, _, lost := parse(data, start, head, nil, nil)
			if lost != c.lost || !slices.Equal(got, c.want) {
				t.Errorf("%s from %d: got %v lost %v, want %v lost %v", c.name, start, got, lost, c.want, c.lost)
			}
		}
	}
	// More bytes than the ring holds: the kernel overwrote what we had.
	if _, _, lost := parse(make([]byte, size), 0, size+8, nil, nil); !lost {
		t.Error("head a ring and more past tail: not lost")
	}
}

func TestParseCPUList(t *testing.T) {
	for s, want := range map[string][]int{"0": {0}, "0-3\n": {0, 1, 2, 3}, "0,2-3": {0, 2, 3}, "": nil} {
		m, err := parseCPUList(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		var got []int
		for c := range m {
			got = append(got, c)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"a", "3-1", "0-x"} {
		if _, err := parseCPUList(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func open(t *testing.T) *Watcher {
	t.Helper()
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	w, err := Open(cpus)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
		t.Skipf("the kernel refuses the watcher: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func load(t *testing.T) (*ebpf.Program, uint32) {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return p, uint32(id)
}

// waitFor drains until every event of want was seen (unloads come from a
// deferred put, a moment after close) and returns what was seen.
func waitFor(t *testing.T, w *Watcher, want []Event) []Event {
	t.Helper()
	var got []Event
	deadline := time.Now().Add(5 * time.Second)
	for {
		var lost bool
		got, lost = w.Drain(got)
		if lost {
			t.Fatal("records lost")
		}
		missing := 0
		for _, e := range want {
			if !slices.ContainsFunc(got, func(g Event) bool { return g.Kind == e.Kind && g.ID == e.ID }) {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: saw %v, want %v among them", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoadUnload loads and closes real programs: their ids come back as
// loads, then as unloads; an idle watcher drains nothing.
func TestLoadUnload(t *testing.T) {
	w := open(t)
	w.Drain(nil) // whatever ran before
	var want []Event
	var progs []*ebpf.Program
	for range 5 {
		p, id := load(t)
		progs = append(progs, p)
		want = append(want, Event{Kind: Load, ID: id})
	}
	got := waitFor(t, w, want)
	for _, e := range got {
		if e.Kind == Unload && slices.ContainsFunc(want, func(x Event) bool { return x.ID == e.ID }) {
			t.Errorf("prog %d unloaded while open", e.ID)
		}
	}
	want = want[:0]
	for _, p := range progs {
		info, _ := p.Info()
		id, _ := info.ID()
		want = append(want, Event{Kind: Unload, ID: uint32(id)})
		p.Close()
	}
	waitFor(t, w, want)
	t.Logf("%d CPUs watched, %d unloads seen", len(w.rings), len(want))
	if w.CPUsChanged() {
		t.Error("online CPUs changed during the test")
	}
}

// TestOverflowIsLost fills one CPU's ring past its size without draining:
// the next drain must say records were lost.
func TestOverflowIsLost(t *testing.T) {
	w := open(t)
	w.Drain(nil)
	// Pin to CPU 0 so every record goes to one ring.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Skipf("cannot pin to CPU 0: %v", err)
	}
	n := dataPages*unixPageSize()/bpfEventSize + 50
	if _, lost := drainAfter(t, w, n); !lost {
		t.Fatalf("%d records into a %d-byte ring: no loss reported", 2*n, dataPages*unixPageSize())
	}
	// The kernel's own LOST record comes with the next record written.
	if ev, lost := drainAfter(t, w, 1); !lost {
		t.Fatalf("the drain after an overflow: %v, no LOST record", ev)
	}
	if ev, lost := drainAfter(t, w, 1); lost || len(ev) < 3 {
		t.Fatalf("a drain after the LOST one: %v lost %v, want 3 or more events (the last drain's open program closed since) and no loss", ev, lost)
	}
}

func unixPageSize() int { return unix.Getpagesize() }

// drainAfter loads and closes n programs (2n records), then drains.
func drainAfter(t *testing.T, w *Watcher, n int) ([]Event, bool) {
	t.Helper()
	for range n {
		p, _ := load(t)
		p.Close()
	}
	p, _ := load(t) // one more record, still open at the drain
	defer p.Close()
	return w.Drain(nil)
}
