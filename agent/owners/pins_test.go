package owners

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

func TestScanPins(t *testing.T) {
	root := filepath.Join("/sys/fs/bpf", "bpfleet-owners-test-"+strconv.Itoa(os.Getpid()))
	deep := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Skipf("creating a directory on bpffs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })

	prog, id := loadProg(t, ebpf.SocketFilter)
	if err := prog.Pin(filepath.Join(root, "prog")); err != nil {
		t.Fatal(err)
	}
	// cilium/ebpf moves an object's pin when pinned again: use another program.
	deepProg, deepID := loadProg(t, ebpf.SocketFilter)
	if err := deepProg.Pin(filepath.Join(deep, "prog-deep")); err != nil {
		t.Fatal(err)
	}
	tp, tpID := loadProg(t, ebpf.RawTracepoint)
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Pin(filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(root, "map")); err != nil {
		t.Fatal(err)
	}

	pins, st := ScanPins([]string{root}, PinOptions{})
	t.Logf("pins %+v stats %+v", pins, st)
	want := []Pin{
		{Path: filepath.Join(root, "a", "b", "prog-deep"), ProgID: deepID},
		{Path: filepath.Join(root, "a", "link"), ProgID: tpID, LinkID: uint32(info.ID)},
		{Path: filepath.Join(root, "prog"), ProgID: id},
	}
	if !slices.Equal(pins, want) {
		t.Errorf("pins = %+v, want %+v", pins, want)
	}
	if st.Files != 4 || st.Skipped != 1 || st.Errors != 0 || st.Truncated {
		t.Errorf("stats %+v: want 4 files, the map skipped, no errors", st)
	}
	byProg := PinsByProg(pins)
	if len(byProg[id]) != 1 || len(byProg[deepID]) != 1 || len(byProg[tpID]) != 1 {
		t.Errorf("PinsByProg = %v", byProg)
	}

	// Bounds: one level down finds no deep pin; one file stops the walk.
	pins, st = ScanPins([]string{root}, PinOptions{MaxDepth: 1})
	if len(pins) != 2 || !st.Truncated {
		t.Errorf("MaxDepth 1: pins %+v stats %+v, want 2 pins and truncated", pins, st)
	}
	pins, st = ScanPins([]string{root}, PinOptions{MaxFiles: 1})
	if len(pins) > 1 || st.Files != 1 || !st.Truncated {
		t.Errorf("MaxFiles 1: pins %+v stats %+v", pins, st)
	}
	// The default root: whatever else is pinned there, the walk makes no
	// errors (the kernel's preloaded iterator files are skipped).
	if _, st := ScanPins(nil, PinOptions{}); st.Errors != 0 {
		t.Errorf("default root: stats %+v", st)
	}
	// A scanner that lives on opens only what is new: a pin replaced at
	// the same path is a new inode, a removed one is forgotten.
	ps := NewPinScanner(PinOptions{})
	if _, st := ps.Scan([]string{root}); st.Opened != 4 {
		t.Errorf("first walk: stats %+v, want 4 files opened", st)
	}
	if pins, st := ps.Scan([]string{root}); st.Opened != 0 || st.Files != 4 || !slices.Equal(pins, want) {
		t.Errorf("second walk: pins %+v stats %+v, want the same pins and nothing opened", pins, st)
	}
	other, otherID := loadProg(t, ebpf.SocketFilter)
	if err := prog.Unpin(); err != nil {
		t.Fatal(err)
	}
	if err := other.Pin(filepath.Join(root, "prog")); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpin(); err != nil {
		t.Fatal(err)
	}
	want[2].ProgID = otherID
	if pins, st := ps.Scan([]string{root}); st.Opened != 1 || st.Files != 3 || !slices.Equal(pins, want) {
		t.Errorf("after replacing a pin and removing one: pins %+v stats %+v, want %+v and one file opened", pins, st, want)
	}
	if len(ps.known) != 3 {
		t.Errorf("the scanner remembers %d files, want the 3 still pinned", len(ps.known))
	}

	// A missing root is an error counted, not a failure.
	_, st = ScanPins([]string{filepath.Join(root, "missing")}, PinOptions{})
	if st.Errors != 1 {
		t.Errorf("missing root: stats %+v, want one error", st)
	}
}

// TestWalkFindsReopenedLink: a link fd opened again from its pin (or by
// id) is named "bpf-link", not "bpf_link" as where it was made; the /proc
// walk finds its holder all the same.
func TestWalkFindsReopenedLink(t *testing.T) {
	root, err := os.MkdirTemp("/sys/fs/bpf", "bpfleet-owners-relink-")
	if err != nil {
		t.Skipf("no bpffs at /sys/fs/bpf: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	tp, tpID := loadProg(t, ebpf.RawTracepoint)
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: tp})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "link")
	if err := l.Pin(path); err != nil {
		t.Fatal(err)
	}
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // the pin keeps it
	again, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	var st Stats
	h, err := NewProcSource("").Holdings(nil, &st)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range h {
		if x.PID == int32(os.Getpid()) && x.LinkID == uint32(info.ID) && x.ProgID == tpID {
			return
		}
	}
	t.Errorf("no holding of link %d (program %d) by this process among %d", info.ID, tpID, len(h))
}

// TestScanPinsKeepsListing: a walk reuses a directory's listing while its
// ctime stays the same, and lists it again once a pin is added or removed
// there, or in it a directory's ctime is too recent to trust.
func TestScanPinsKeepsListing(t *testing.T) {
	defer func(d time.Duration) { racyDir = d }(racyDir)
	racyDir = 100 * time.Millisecond
	root, err := os.MkdirTemp("/sys/fs/bpf", "bpfleet-owners-keep-")
	if err != nil {
		t.Skipf("no bpffs at /sys/fs/bpf: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	pin := func(p *ebpf.Program, path string) {
		t.Helper()
		if err := p.Pin(path); err != nil {
			t.Fatal(err)
		}
	}
	a, aID := loadProg(t, ebpf.SocketFilter)
	pin(a, filepath.Join(root, "a"))
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(sub, "map")); err != nil {
		t.Fatal(err)
	}
	s := NewPinScanner(PinOptions{})
	defer s.Close()
	roots := []string{root}
	walk := func(what string, wantIDs []uint32, listed, kept int) {
		t.Helper()
		pins, st := s.Scan(roots)
		var ids []uint32
		for _, p := range pins {
			ids = append(ids, p.ProgID)
		}
		if !slices.Equal(ids, wantIDs) || st.DirsListed != listed || st.DirsKept != kept || st.Files != len(wantIDs)+1 || st.Errors != 0 {
			t.Fatalf("%s: pins %v, stats %+v; want programs %v, %d directories listed, %d kept, %d files", what, ids, st, wantIDs, listed, kept, len(wantIDs)+1)
		}
	}
	walk("a walk right after the pins", []uint32{aID}, 2, 0)
	time.Sleep(150 * time.Millisecond)
	walk("first walk with the ctimes old enough", []uint32{aID}, 2, 0)
	walk("unchanged", []uint32{aID}, 0, 2)

	b, bID := loadProg(t, ebpf.SocketFilter)
	pin(b, filepath.Join(root, "b"))
	walk("a pin added", []uint32{aID, bID}, 1, 1) // the root listed again, sub kept
	time.Sleep(150 * time.Millisecond)
	walk("root listed again, its ctime old enough now", []uint32{aID, bID}, 1, 1)
	walk("unchanged again", []uint32{aID, bID}, 0, 2)

	if err := os.Remove(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	walk("a pin removed", []uint32{bID}, 1, 1)
	if len(s.known) != 2 {
		t.Errorf("the scanner remembers %d files, want 2 (b, the map)", len(s.known))
	}
}
