package owners

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

func loadProg(t testing.TB, typ ebpf.ProgramType) (*ebpf.Program, uint32) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "owners_test",
		Type:         typ,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("loading a %v program: %v (needs CAP_BPF)", typ, err)
		}
		t.Fatalf("loading a %v program: %v", typ, err)
	}
	t.Cleanup(func() { prog.Close() })
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel gave no program id")
	}
	return prog, uint32(id)
}

func selfComm(t testing.TB) string {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ownerByPID(os []Owner, pid int) *Owner {
	for i := range os {
		if os[i].PID == pid {
			return &os[i]
		}
	}
	return nil
}

// startHolder starts `sleep` holding a dup of prog's fd as its fd 3.
func startHolder(t *testing.T, prog *ebpf.Program) *exec.Cmd {
	t.Helper()
	dup, err := prog.Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	// Clone dups the fd; hand the dup to the child.
	fd, err := syscall.Dup(dup.FD())
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "prog")
	defer f.Close()
	cmd := exec.Command("sleep", "60")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Wait until the child has exec'd sleep, so its comm is final.
	for i := 0; i < 200; i++ {
		if b, _ := os.ReadFile("/proc/" + itoa(int32(cmd.Process.Pid)) + "/comm"); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd
}

func TestScanFindsTestProcessAndChild(t *testing.T) {
	prog, id := loadProg(t, ebpf.SocketFilter)
	child := startHolder(t, prog)

	s := NewScanner("", nil)
	r, err := s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v in %v", r.Stats, r.Duration)
	owners := r.Programs[id]
	me := ownerByPID(owners, os.Getpid())
	if me == nil {
		t.Fatalf("test process %d not among owners %+v of prog %d", os.Getpid(), owners, id)
	}
	exe, _ := os.Executable()
	if me.Comm != selfComm(t) || me.Exe != exe || me.Via != ViaFD {
		t.Errorf("owner %+v: want comm %q exe %q via fd", me, selfComm(t), exe)
	}
	if me.Cgroup == "" {
		t.Errorf("owner %+v has no cgroup", me)
	}
	c := ownerByPID(owners, child.Process.Pid)
	if c == nil {
		t.Fatalf("child %d not among owners %+v", child.Process.Pid, owners)
	}
	if c.Comm != "sleep" || !strings.HasSuffix(c.Exe, "/sleep") {
		t.Errorf("child owner %+v: want comm sleep", c)
	}
	if r.Stats.Procs < 2 || r.Stats.FDs < 2 || r.Stats.BPFFDs < 2 {
		t.Errorf("stats %+v count less than what this test holds", r.Stats)
	}

	// The filter drops programs it does not want, without error.
	r, err = s.Scan(func(p uint32) bool { return p != id })
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Programs[id]) != 0 {
		t.Errorf("filtered-out prog %d still has owners %+v", id, r.Programs[id])
	}

	// Once the child is gone it is no longer an owner.
	child.Process.Kill()
	child.Wait()
	r, err = s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ownerByPID(r.Programs[id], child.Process.Pid) != nil || ownerByPID(r.Programs[id], os.Getpid()) == nil {
		t.Errorf("after the child exited, owners = %+v", r.Programs[id])
	}
	if _, cached := s.cache[int32(child.Process.Pid)]; cached {
		t.Errorf("exited child still in the fact cache")
	}
}

// attachRawTP links prog to task_rename for the test and returns the link id.
func attachRawTP(t *testing.T, prog *ebpf.Program) uint32 {
	t.Helper()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: prog})
	if err != nil {
		t.Fatalf("attaching raw_tp: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	return uint32(info.ID)
}

func TestScanLinkOwner(t *testing.T) {
	prog, id := loadProg(t, ebpf.RawTracepoint)
	lid := attachRawTP(t, prog)
	// Only the link keeps the program now.
	prog.Close()

	r, err := NewScanner("", nil).Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	me := ownerByPID(r.Programs[id], os.Getpid())
	if me == nil || me.Via != ViaLink {
		t.Fatalf("prog %d owners %+v: want pid %d via link", id, r.Programs[id], os.Getpid())
	}
	if r.LinkProgs[lid] != id {
		t.Errorf("link %d prog = %d, want %d", lid, r.LinkProgs[lid], id)
	}
	if pids := r.Links[lid]; len(pids) != 1 || pids[0] != os.Getpid() {
		t.Errorf("link %d pids = %v, want [%d]", lid, pids, os.Getpid())
	}
}

// vanishingSource kills a holder after its fds were listed and before the
// scanner reads its facts.
type vanishingSource struct {
	*ProcSource
	kill *exec.Cmd
}

func (v vanishingSource) Holdings(dst []Holding, st *Stats) ([]Holding, error) {
	dst, err := v.ProcSource.Holdings(dst, st)
	v.kill.Process.Kill()
	v.kill.Wait()
	return dst, err
}

func TestScanSurvivesExitMidWalk(t *testing.T) {
	prog, id := loadProg(t, ebpf.SocketFilter)

	// 1: a process exits between opening its fd directory and reading it.
	early := startHolder(t, prog)
	src := NewProcSource("")
	src.afterList = func(pid int32) {
		if int(pid) == early.Process.Pid {
			early.Process.Kill()
			early.Wait()
		}
	}
	r, err := NewScanner("", src).Scan(nil)
	if err != nil {
		t.Fatalf("scan with a process exiting mid-walk: %v", err)
	}
	if r.Stats.Vanished < 1 {
		t.Errorf("stats %+v: the killed process was not counted as vanished", r.Stats)
	}
	if ownerByPID(r.Programs[id], early.Process.Pid) != nil || ownerByPID(r.Programs[id], os.Getpid()) == nil {
		t.Errorf("owners %+v: want this process and not the killed one", r.Programs[id])
	}

	// 2: a process exits after its holdings were read, before its facts.
	late := startHolder(t, prog)
	r, err = NewScanner("", vanishingSource{NewProcSource(""), late}).Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if ownerByPID(r.Programs[id], late.Process.Pid) != nil || ownerByPID(r.Programs[id], os.Getpid()) == nil {
		t.Errorf("owners %+v: want this process and not the killed one", r.Programs[id])
	}
	if r.Stats.Vanished < 1 {
		t.Errorf("stats %+v: the killed process was not counted as vanished", r.Stats)
	}
}

func TestScanUnderProcessChurn(t *testing.T) {
	_, id := loadProg(t, ebpf.SocketFilter)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				exec.Command("true").Run()
			}
		}()
	}
	s := NewScanner("", nil)
	for i := range 30 {
		r, err := s.Scan(nil)
		if err != nil {
			t.Fatalf("scan %d: %v", i, err)
		}
		if ownerByPID(r.Programs[id], os.Getpid()) == nil {
			t.Fatalf("scan %d lost the test process as owner of %d", i, id)
		}
	}
	close(stop)
	wg.Wait()
}

func TestScanMissingProcfs(t *testing.T) {
	_, err := NewScanner("/nonexistent-proc", nil).Scan(nil)
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("scan of a missing procfs: err = %v, want ENOENT", err)
	}
}

func TestParseStatStart(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1 (systemd) S 0 1 1 0 -1 4194560 100 200 10 20 30 40 50 60 20 0 1 0 42 170000000 3000 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0\n", 42, true},
		{"77 (a) b (c) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0\n", 123456, true},
		{"77 (x)", 0, false},
		{"no paren", 0, false},
		{"", 0, false},
	} {
		got, ok := parseStatStart([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStatStart(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// The fact cache: a holder's facts are read once while its start time stays
// the same, and read afresh when the pid's start time changes (pid reuse).
func TestScanFactCache(t *testing.T) {
	_, id := loadProg(t, ebpf.SocketFilter)
	s := NewScanner("", nil)
	if _, err := s.Scan(nil); err != nil {
		t.Fatal(err)
	}
	pf := s.cache[int32(os.Getpid())]
	if pf == nil {
		t.Fatal("test process not cached after a scan")
	}
	pf.comm = "cached"
	r, err := s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := ownerByPID(r.Programs[id], os.Getpid()); o == nil || o.Comm != "cached" {
		t.Fatalf("same start time: owner %+v, want the cached comm", o)
	}
	pf.start-- // as if the pid now named another process
	r, err = s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := ownerByPID(r.Programs[id], os.Getpid()); o == nil || o.Comm != selfComm(t) {
		t.Fatalf("changed start time: owner %+v, want comm re-read as %q", o, selfComm(t))
	}
}

// TestPidfdAndFdinfoAgree: the two ways of reading a BPF fd's ids find the
// same holdings (a program fd here and in a child, a link fd here), and the
// pidfd way is the one taken where the kernel allows it.
func TestPidfdAndFdinfoAgree(t *testing.T) {
	prog, id := loadProg(t, ebpf.SocketFilter)
	child := startHolder(t, prog)
	lprog, lprogID := loadProg(t, ebpf.RawTracepoint)
	lid := attachRawTP(t, lprog)

	mine := func(dup bool) (map[Holding]bool, Stats) {
		src := NewProcSource("")
		src.dup, src.dupKnown = dup, true
		var st Stats
		hs, err := src.Holdings(nil, &st)
		if err != nil {
			t.Fatal(err)
		}
		got := map[Holding]bool{}
		for _, h := range hs {
			if h.PID == int32(os.Getpid()) || h.PID == int32(child.Process.Pid) {
				h.FD = 0 // fd numbers are the same either way; compare ids
				got[h] = true
			}
		}
		return got, st
	}
	viaFdinfo, stF := mine(false)
	viaPidfd, stP := mine(true)
	t.Logf("fdinfo: %+v; pidfd: %+v", stF, stP)
	for _, want := range []Holding{
		{PID: int32(os.Getpid()), ProgID: id},
		{PID: int32(child.Process.Pid), ProgID: id},
		{PID: int32(os.Getpid()), ProgID: lprogID, LinkID: lid},
	} {
		if !viaFdinfo[want] || !viaPidfd[want] {
			t.Errorf("holding %+v: found via fdinfo %v, via pidfd %v", want, viaFdinfo[want], viaPidfd[want])
		}
	}
	if len(viaFdinfo) != len(viaPidfd) {
		t.Errorf("fdinfo found %d holdings of this test, pidfd %d", len(viaFdinfo), len(viaPidfd))
	}
	if stF.ByPidfd != 0 {
		t.Errorf("fdinfo walk read %d fds through pidfd_getfd", stF.ByPidfd)
	}
	if !samePidNamespace("/proc") {
		t.Fatal("/proc is not this process's pid namespace")
	}
	// The walk falls back to fdinfo where the kernel refuses pidfd_getfd
	// (before 5.6, Yama, seccomp, an LSM): ask it the same of the child.
	if stP.ByPidfd < stP.BPFFDs-stP.Vanished {
		pidfd, err := pidfdOpen(int32(child.Process.Pid))
		if err != nil {
			t.Skipf("kernel refuses pidfd_open: %v; only the fdinfo walk was tested", err)
		}
		defer unix.Close(pidfd)
		if _, err := dupIDs(pidfd, 3, true); err != nil {
			t.Skipf("kernel refuses pidfd_getfd of a child's fd: %v; only the fdinfo walk was tested", err)
		}
		t.Errorf("pidfd walk read only %d of %d BPF fds through pidfd_getfd", stP.ByPidfd, stP.BPFFDs)
	}
}
