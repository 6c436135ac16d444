package progstats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/probes/internal/iterpin"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// testBPFFS is a directory of its own on the host's bpffs, so that the
// tests' pins never replace or remove a running agent's.
func testBPFFS(t *testing.T) string {
	t.Helper()
	if err := iterpin.CheckBPFFS("/sys/fs/bpf"); err != nil {
		t.Skipf("no bpffs to pin in: %v", err)
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("bpfleet-test-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func publish(t *testing.T, bpffs string, cpus int) *Published {
	t.Helper()
	p, err := Publish(bpffs, cpus)
	if errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(t, expect.FeatProgStats, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func cpusOrFatal(t *testing.T) int {
	t.Helper()
	n, err := PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPinnedEqualsLoaded: an iterator opened from the agent's pin reads,
// for every idle program, the same whole record as an iterator loaded in
// this process, and stays whole while the loaded instance (the agent's
// scanning one) reads only counters for the programs it knows.
func TestPinnedEqualsLoaded(t *testing.T) {
	dir, cpus := testBPFFS(t), cpusOrFatal(t)
	idle := map[uint32]bool{}
	for i := range 5 {
		idle[progID(t, socketFilter(t, fmt.Sprintf("pin_idle%d", i)))] = true
	}
	own := loadIter(t)
	pub := publish(t, dir, cpus)
	defer pub.Close()

	// The agent's own instance: after one read it knows every program
	// and its later reads give counters only.
	first, err := own.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.SetKnownMaxID(first[len(first)-1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := own.Read(nil); err != nil {
		t.Fatal(err)
	}

	pin, err := OpenPinned(dir, cpus)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if pin.Path() != pub.Path() {
		t.Fatalf("opened %s, published %s", pin.Path(), pub.Path())
	}
	if err := pin.SetKnownMaxID(1 << 30); err != nil { // must not make its records partial
		t.Fatal(err)
	}
	got, err := pin.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's scan reads with ReadStats: every program's record whole.
	stats, whole, err := pin.ReadStats(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.Whole < 0 || whole[st.Whole].ID != st.ID {
			t.Errorf("pinned ReadStats gave program %d without its whole record (index %d)", st.ID, st.Whole)
		}
	}
	fresh := loadIter(t)
	want, err := fresh.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint32]Record{}
	for _, r := range want {
		byID[r.ID] = r
	}
	sawPinProg := false
	for _, r := range got {
		// Any program may lack StaticKnown (subprograms, more than
		// MaxMapIDs maps: another tool's, or a running agent's stats
		// table with its bpf_loop callback); the test's own may not.
		if !r.Whole || !r.StatsKnown || idle[r.ID] && !r.StaticKnown {
			t.Errorf("pinned record of %d %s is not whole (whole %v static %v stats %v)", r.ID, r.Name, r.Whole, r.StaticKnown, r.StatsKnown)
		}
		sawPinProg = sawPinProg || r.ID == pin.ProgramID()
		if !idle[r.ID] {
			continue
		}
		w, ok := byID[r.ID]
		if !ok {
			t.Errorf("prog %d in the pinned read, not in the loaded one", r.ID)
			continue
		}
		if r != w {
			t.Errorf("prog %d: pinned %+v\nloaded %+v", r.ID, r, w)
		}
		delete(idle, r.ID)
	}
	if len(idle) > 0 {
		t.Errorf("idle programs missing from the pinned read: %v", idle)
	}
	if !sawPinProg {
		t.Errorf("the pinned read does not list the pinned program %d itself", pin.ProgramID())
	}
}

// TestPinReplacedAndRemoved: a second agent's pin replaces the first's
// (a stale pin of an agent that did not exit is replaced the same way);
// the first agent's Close then leaves the second's pin alone, and the
// second's Close removes it.
func TestPinReplacedAndRemoved(t *testing.T) {
	dir, cpus := testBPFFS(t), cpusOrFatal(t)
	a := publish(t, dir, cpus)
	b := publish(t, dir, cpus)
	pin, err := OpenPinned(dir, cpus)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := pin.link.Info(); err != nil || info.ID != b.LinkID() {
		t.Errorf("pin holds link %v (%v), want the second agent's %d", info, err, b.LinkID())
	}
	pin.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Path()); err != nil {
		t.Fatalf("the first agent's exit removed the second's pin: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pin still there after the agent closed it: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, iterpin.Dir, "*")); len(leftovers) > 0 {
		t.Errorf("left in the pin directory: %v", leftovers)
	}
	_, err = OpenPinned(dir, cpus)
	if err == nil || !strings.Contains(err.Error(), "no iterator pinned at") {
		t.Fatalf("open without a pin: %v, want one line saying no iterator is pinned", err)
	}
}

// TestPinRefused: what is not the agent's iterator is refused in one line
// (a program pinned at the path, a pin for another CPU count, a directory
// that is not bpffs).
func TestPinRefused(t *testing.T) {
	dir, cpus := testBPFFS(t), cpusOrFatal(t)
	if err := os.MkdirAll(filepath.Join(dir, iterpin.Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	p := socketFilter(t, "pin_foreign")
	if err := p.Pin(PinPath(dir, cpus)); err != nil {
		t.Fatal(err)
	}
	defer p.Unpin()
	_, err := OpenPinned(dir, cpus)
	if err == nil || !strings.Contains(err.Error(), "not a Link") {
		t.Errorf("a program pinned at the path: %v, want refused as not a link", err)
	}
	p.Unpin()

	pub := publish(t, dir, cpus)
	defer pub.Close()
	if _, err := OpenPinned(dir, cpus+1); err == nil || !strings.Contains(err.Error(), "no iterator pinned") {
		t.Errorf("pin for %d CPUs opened for %d: %v", cpus, cpus+1, err)
	}
	if _, err := OpenPinned(t.TempDir(), cpus); err == nil || !strings.Contains(err.Error(), "is not a bpffs mount") {
		t.Errorf("no bpffs: %v", err)
	}
	if _, err := Publish(t.TempDir(), cpus); err == nil || !strings.Contains(err.Error(), "is not a bpffs mount") {
		t.Errorf("publish without bpffs: %v", err)
	}
}

// TestPublishReadOnly: where the pin directory is read-only (the chart's
// default bpffs mount), Publish says so before loading anything to pin.
func TestPublishReadOnly(t *testing.T) {
	dir, cpus := testBPFFS(t), cpusOrFatal(t)
	pins := filepath.Join(dir, iterpin.Dir)
	if err := os.MkdirAll(pins, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(pins, pins, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s: %v", pins, err)
	}
	t.Cleanup(func() { unix.Unmount(pins, unix.MNT_DETACH) })
	if err := unix.Mount("", pins, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remounting %s read-only: %v", pins, err)
	}
	p, err := Publish(dir, cpus)
	if err == nil {
		p.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "is not writable") {
		t.Errorf("publish into a read-only pin directory: %v, want refused as not writable before any load", err)
	}
}
