package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/cilium/ebpf"
)

// TestEntriesSharedAcrossSnapshots runs real programs between real scans:
// an idle program's entry is the previous snapshot's very entry, a program
// that ran gets a new one, and the older snapshot still says what it said
// (the API's history keeps snapshots, so entries are never written once
// handed out).
func TestEntriesSharedAcrossSnapshots(t *testing.T) {
	a := newTestAgentWith(t, Config{StatsMode: StatsAlways})
	progs := scantest.LoadPrograms(t, 2)
	idleID, busyID := scantest.ProgID(t, progs[0]), scantest.ProgID(t, progs[1])
	run := func() {
		if _, err := progs[1].Run(&ebpf.RunOptions{Data: make([]byte, 14), Repeat: 10}); err != nil {
			t.Fatalf("test-running program %d: %v", busyID, err)
		}
	}
	scan(t, a) // first sight: New entries
	s2 := scan(t, a)
	frozen, _ := json.Marshal(s2)
	before := *findProg(s2, busyID)
	run()
	s3 := scan(t, a)
	if findProg(s3, idleID) != findProg(s2, idleID) {
		t.Errorf("idle program %d got a new entry", idleID)
	}
	busy2, busy3 := findProg(s2, busyID), findProg(s3, busyID)
	if busy3 == busy2 {
		t.Fatalf("program %d ran but kept its entry", busyID)
	}
	if busy3.Delta.Runs != 10 || busy3.RunCount != before.RunCount+10 {
		t.Errorf("program %d: delta %d runs, count %d, want 10 more than %d", busyID, busy3.Delta.Runs, busy3.RunCount, before.RunCount)
	}
	if again, _ := json.Marshal(s2); string(again) != string(frozen) {
		t.Errorf("an older snapshot changed after a later scan")
	}
	// Idle again: a new entry with a zero delta, then that one is kept.
	s4 := scan(t, a)
	s5 := scan(t, a)
	if p := findProg(s4, busyID); p == busy3 || p.Delta != (Rates{}) {
		t.Errorf("program %d idle after running: entry %p (was %p), delta %+v", busyID, p, busy3, p.Delta)
	}
	if findProg(s5, busyID) != findProg(s4, busyID) || findProg(s5, idleID) != findProg(s2, idleID) {
		t.Errorf("idle programs got new entries in scan 5")
	}
}

// TestOwnerGoneWhileJoinsKept: the same programs and links scan after
// scan (the reader keeps their joins), and an owner refresh finds that the
// process holding a program let it go (it stays, pinned): the next
// snapshot has no owner left from the kept joins, and the pin.
func TestOwnerGoneWhileJoinsKept(t *testing.T) {
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("bpfleet-ownergone-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Skipf("cannot use the host's bpffs at /sys/fs/bpf: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a := newTestAgentWith(t, Config{Owners: true, OwnerRefresh: time.Nanosecond})
	progs := scantest.LoadPrograms(t, 1)
	id := scantest.ProgID(t, progs[0])
	pin := filepath.Join(dir, "prog")
	if err := progs[0].Pin(pin); err != nil {
		t.Fatal(err)
	}
	held := func(s *Snapshot) bool {
		for _, o := range findProg(s, id).Owners {
			if o.PID == os.Getpid() {
				return true
			}
		}
		return false
	}
	scan(t, a)
	if s := scan(t, a); !held(s) {
		t.Fatalf("program %d: not held by this test (pid %d): %+v", id, os.Getpid(), findProg(s, id).Owners)
	}
	progs[0].Close() // the pin keeps it
	s := scan(t, a)
	if !s.Scan.OwnersRefreshed {
		t.Fatal("no owner refresh with a refresh period of 1ns")
	}
	if p := findProg(s, id); held(s) || !slices.Contains(p.Pins, pin) {
		t.Errorf("program %d after its fd closed: owners %+v (this test is pid %d), pins %v, want none and %s", id, p.Owners, os.Getpid(), p.Pins, pin)
	}
}
