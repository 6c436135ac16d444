package agent

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"golang.org/x/sys/unix"
)

// startSleeper starts a child process that sleeps, holding extra (inherited
// fds, e.g. a BPF program's), and kills it at cleanup.
func startSleeper(t *testing.T, extra ...*os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = extra
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// The watch says an owner exited exactly when it did: not while it runs,
// at once after it exits, and for a pid already gone when the watch began.
func TestOwnerWatch(t *testing.T) {
	child := startSleeper(t)
	var w ownerWatch
	defer w.close()
	w.reset(map[int]bool{os.Getpid(): true, child.Process.Pid: true})
	if w.broken {
		t.Fatalf("the kernel refused a pidfd for a live child: %+v", w)
	}
	if w.exited() {
		t.Fatal("exited while every owner runs")
	}
	_ = child.Process.Kill()
	_ = child.Wait() // reaped: the pid is free
	if !w.exited() {
		t.Fatal("the killed owner was not seen exiting")
	}
	w.reset(map[int]bool{child.Process.Pid: true})
	if !w.exited() {
		t.Fatal("an owner gone before the watch began was not reported")
	}
	w.reset(nil)
	if w.exited() {
		t.Fatal("no owners, yet one exited")
	}
}

// An owner process that exits makes the next scan re-read owners, long
// before the refresh period: the program's owners then no longer name it.
func TestOwnerExitRefreshesOwners(t *testing.T) {
	progs := scantest.LoadPrograms(t, 1)
	info, err := progs[0].Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	// The file gets a dup of its own: handing it the program's fd would
	// give one number two owners, and the second one's finalizer would
	// close whatever a later test opened under that number.
	fd, err := unix.FcntlInt(uintptr(progs[0].FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "prog")
	defer f.Close()
	child := startSleeper(t, f) // holds the program as its fd 3
	a := newTestAgentWith(t, Config{Owners: true, OwnerIterator: true})
	owners := func(s *Snapshot) map[int]bool {
		p := findProg(s, uint32(id))
		if p == nil {
			t.Fatalf("program %d missing", id)
		}
		m := map[int]bool{}
		for _, o := range p.Owners {
			m[o.PID] = true
		}
		return m
	}
	scan(t, a)
	s := scan(t, a) // past the first walk's horizon
	if !owners(s)[child.Process.Pid] {
		t.Fatalf("the child %d holding program %d is not among its owners %v", child.Process.Pid, id, owners(s))
	}
	if !a.attr.ownersStable() {
		t.Fatalf("owners not watched (the slow period would not apply): %+v", a.attr.watch)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	s = scan(t, a)
	if !s.Scan.OwnersRefreshed {
		t.Error("an owner exited and the scan did not re-read owners")
	}
	if owners(s)[child.Process.Pid] {
		t.Errorf("the exited child %d is still an owner: %v", child.Process.Pid, owners(s))
	}
}

// A reset keeps the pidfd of an owner that still runs (the very fd: a
// mark set on it survives), closes that of an owner gone from the set,
// and opens one for a new owner.
func TestOwnerWatchKeepsRunningOwners(t *testing.T) {
	a, b := startSleeper(t), startSleeper(t)
	var w ownerWatch
	defer w.close()
	fdOf := func(pid int) int32 {
		t.Helper()
		for i, p := range w.pids {
			if p == pid {
				return w.fds[i].Fd
			}
		}
		return -2
	}
	w.reset(map[int]bool{os.Getpid(): true, a.Process.Pid: true})
	if w.broken {
		t.Fatalf("the kernel refused a pidfd for a live child: %+v", w)
	}
	me, fa := fdOf(os.Getpid()), fdOf(a.Process.Pid)
	if me < 0 || fa < 0 {
		t.Fatalf("pidfds %d (self), %d (child): want both open", me, fa)
	}
	// pidfd_open sets close-on-exec; a pidfd opened again would have it.
	if _, err := unix.FcntlInt(uintptr(me), unix.F_SETFD, 0); err != nil {
		t.Fatal(err)
	}
	w.reset(map[int]bool{os.Getpid(): true, b.Process.Pid: true})
	if got := fdOf(os.Getpid()); got != me {
		t.Errorf("own pidfd %d after reset, want %d kept", got, me)
	} else if fl, err := unix.FcntlInt(uintptr(me), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC != 0 {
		t.Errorf("own pidfd %d was opened again (flags %#x, %v)", me, fl, err)
	}
	if fdOf(b.Process.Pid) < 0 {
		t.Errorf("no pidfd for the new owner %d: %+v", b.Process.Pid, w)
	}
	if fdOf(a.Process.Pid) != -2 {
		t.Errorf("the owner %d left the set, yet is still watched: %+v", a.Process.Pid, w)
	}
	if w.exited() {
		t.Error("exited while every owner runs")
	}
	// An owner that exited is watched afresh: its pid no longer names it.
	_ = b.Process.Kill()
	_ = b.Wait()
	w.reset(map[int]bool{os.Getpid(): true, b.Process.Pid: true})
	if !w.exited() {
		t.Error("an owner that exited before the reset is not reported")
	}
}

// A program loaded after the early holders' walk passed its loader, but
// before the program read, is exported with its owner in that very scan:
// ownerless first and owned a scan later, its workload series would
// change key (a second series for every such load).
func TestProgramLoadedDuringEarlyWalkOwned(t *testing.T) {
	a := newTestAgentWith(t, Config{Owners: true})
	scan(t, a)
	a.ownersAt = time.Time{} // the refresh period passed: an early walk
	var id uint32
	a.afterEarlyWalk = func(e *earlyHolders) {
		h := <-e.c // the walk is over
		id = scantest.ProgID(t, scantest.LoadPrograms(t, 1)[0])
		e.c <- h
	}
	s := scan(t, a)
	a.afterEarlyWalk = nil
	if id <= a.maxProgID && id > 0 {
		p := findProg(s, id)
		if p == nil {
			t.Fatalf("program %d missing", id)
		}
		for _, o := range p.Owners {
			if o.PID == os.Getpid() {
				return
			}
		}
		t.Fatalf("program %d, loaded during the early walk, has owners %+v: want this process (%d)", id, p.Owners, os.Getpid())
	}
	t.Fatalf("the early walk did not run or the program was not read (id %d, highest %d)", id, a.maxProgID)
}
