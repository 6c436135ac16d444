package agent

import (
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/probes/taskfile"
)

// countedSource counts the owner walks a Scanner makes.
type countedSource struct {
	owners.Source
	n *int
}

func (c countedSource) Holdings(dst []owners.Holding, st *owners.Stats) ([]owners.Holding, error) {
	*c.n++
	return c.Source.Holdings(dst, st)
}

// TestAgentNotOwnerOfWhatItReads: a program read by id (the syscall scan
// source) holds the program's fd for a moment, and the owner walk made
// beside the read must not take that fd for a holding. A child process
// holds 16 programs; the test process (the agent) holds one more. The
// early walk is made to start while the read holds one of the child's
// programs and the read waits there until the walk is over: on every
// scan, not by luck of timing. The child's programs must be owned by the
// child alone, and the agent's own by the agent (via fd): its holdings
// are not simply dropped. Both owner sources (task_file iterator, /proc
// walk), for a long-running agent and a one-shot list.
func TestAgentNotOwnerOfWhatItReads(t *testing.T) {
	const n = 16
	progs := scantest.LoadPrograms(t, n+1)
	ownID := scantest.ProgID(t, progs[n]) // held by this process throughout
	childIDs := map[uint32]bool{}
	var files []*os.File
	for _, p := range progs[:n] {
		childIDs[scantest.ProgID(t, p)] = true
		// A dup of its own for each file: see TestOwnerExitRefreshesOwners.
		fd, err := unix.FcntlInt(uintptr(p.FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, os.NewFile(uintptr(fd), "prog"))
	}
	child := startSleeper(t, files...).Process.Pid
	for i, f := range files {
		f.Close()
		progs[i].Close() // the child alone holds them from here
	}

	for _, c := range []struct {
		name          string
		iter, oneShot bool
	}{{"iterator", true, false}, {"proc", false, false}, {"iterator-list", true, true}, {"proc-list", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			for try := 0; ; try++ {
				if testAgentNotOwnerOfWhatItReads(t, c.iter, c.oneShot, childIDs, child, ownID) {
					return
				}
				if try == 4 {
					t.Fatal("every scan walked owners again after its early walk: the early walk was not tested")
				}
			}
		})
	}
}

// testAgentNotOwnerOfWhatItReads makes one scan whose owners come from an
// early walk run while the read holds a child's program, and checks them;
// false when the scan walked again after the read (another tool loaded a
// program no process holds meanwhile), so that the early walk's answer
// was not used.
func testAgentNotOwnerOfWhatItReads(t *testing.T, iter, oneShot bool, childIDs map[uint32]bool, child int, ownID uint32) bool {
	cfg := Config{Owners: true, OwnerIterator: iter, OneShot: oneShot, ScanSource: reader.ScanSourceSyscall}
	if oneShot {
		cfg.Parallel = 4 // list reads on every CPU: several fds open at once
	}
	a := newTestAgentWith(t, cfg)
	if iter && a.attr.iterErr != nil {
		t.Skipf("no task_file iterator: %v", a.attr.iterErr)
	}
	walks := 0
	if !oneShot {
		// A long-running agent walks again after the read where the
		// early walk found no holder for a new program: count the walks
		// to know the early one's answer was used.
		var src owners.Source = owners.NewProcSource("/proc")
		if iter {
			it, _, err := taskfile.LoadCached("")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { it.Close() })
			src = taskfileSource{it}
		}
		a.attr.scanner = owners.NewScanner("/proc", countedSource{src, &walks})
		scan(t, a)
		a.ownersAt = time.Time{} // the refresh period passed: an early walk
		walks = 0
	}

	var early *earlyHolders
	holding := make(chan struct{})
	var once sync.Once
	a.afterEarlyWalk = func(e *earlyHolders) { early = e }
	a.earlyWalkStart = func() {
		select {
		case <-holding:
		case <-time.After(10 * time.Second):
			t.Error("the read never held a child's program: the walk ran without it")
		}
	}
	a.r.WhileOpen(func(id uint32) {
		if childIDs[id] {
			once.Do(func() {
				close(holding) // the walk starts now
				h := <-early.c // and is over
				early.c <- h
			})
		}
	})
	s := scan(t, a)
	a.r.WhileOpen(nil)
	a.afterEarlyWalk, a.earlyWalkStart = nil, nil
	if s.Scan.Source != reader.ScanSourceSyscall || !s.Scan.OwnersRefreshed {
		t.Fatalf("scan read programs by %s, owners refreshed %v: want syscall, refreshed", s.Scan.Source, s.Scan.OwnersRefreshed)
	}
	if !oneShot && walks != 1 {
		t.Logf("%d owner walks in the scan: the early walk's answer was not used; again", walks)
		return false
	}

	self := os.Getpid()
	for id := range childIDs {
		p := findProg(s, id)
		if p == nil {
			t.Fatalf("program %d missing", id)
		}
		if len(p.Owners) != 1 || p.Owners[0].PID != child || p.Owners[0].Via != owners.ViaFD {
			t.Errorf("program %d, held by the child %d alone, has owners %+v: want the child via fd, not the agent (%d) that read it",
				id, child, p.Owners, self)
		}
	}
	p := findProg(s, ownID)
	if p == nil {
		t.Fatalf("program %d missing", ownID)
	}
	if len(p.Owners) != 1 || p.Owners[0].PID != self || p.Owners[0].Via != owners.ViaFD {
		t.Errorf("program %d, held by the agent (%d) alone, has owners %+v: want the agent via fd", ownID, self, p.Owners)
	}
	return true
}
