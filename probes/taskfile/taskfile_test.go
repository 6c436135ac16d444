package taskfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/test/perfattach"
)

// The helper process: re-executed test binary that holds the fds it
// inherited until its stdin closes. Works where no other binary exists
// (the kernel-matrix VMs run the test binary as /init).
const helperEnv = "BPFLEET_TASKFILE_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Stdout.WriteString("ready\n")
		var b [1]byte
		os.Stdin.Read(b[:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func loadIter(tb testing.TB, linksByName bool) *Iter {
	tb.Helper()
	it, _, err := load(linksByName, "")
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel refuses iter/task_file: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { it.Close() })
	return it
}

var returnZero = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

func progID(tb testing.TB, p *ebpf.Program) uint32 {
	tb.Helper()
	info, err := p.Info()
	if err != nil {
		tb.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

func comm(tb testing.TB, pid int) string {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// startHolder starts a child process that inherits f as its fd 3.
func startHolder(t *testing.T, f *os.File) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.ExtraFiles = []*os.File{f}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper process did not start: %q %v", line, err)
	}
	return cmd.Process.Pid
}

func TestFindsHolders(t *testing.T) {
	for _, c := range []struct {
		name   string
		byName bool
	}{
		{"learned", false},
		// Links whose fops cannot be learned (bpf_link_fops_poll) are
		// found by their anonymous-inode name.
		{"links-by-name", true},
	} {
		t.Run(c.name, func(t *testing.T) { testFindsHolders(t, loadIter(t, c.byName)) })
	}
	// Loaded from the CO-RE cache (probes/internal/coreload), as a
	// one-shot list does, after a load that wrote it.
	t.Run("cached", func(t *testing.T) {
		dir := t.TempDir()
		for _, wantCached := range []bool{false, true} {
			it, li, err := LoadCached(dir)
			if errors.Is(err, ebpf.ErrNotSupported) {
				t.Skipf("kernel refuses iter/task_file: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { it.Close() })
			if li.Cached != wantCached || li.CacheErr != nil || Cached(dir) != true {
				t.Fatalf("cached %v (want %v), cache error %v, Cached(dir) %v", li.Cached, wantCached, li.CacheErr, Cached(dir))
			}
			testFindsHolders(t, it)
		}
	})
	if Cached(t.TempDir()) || Cached("") {
		t.Error("an empty cache directory, or none, holds the iterator")
	}
}

func testFindsHolders(t *testing.T, it *Iter) {
	filter, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tf_filter", Type: ebpf.SocketFilter, Instructions: returnZero, License: "GPL"})
	if err != nil {
		t.Fatal(err)
	}
	defer filter.Close()
	filterID := progID(t, filter)
	// A second fd to the same program, the way an agent scanning by id
	// opens one.
	byID, err := ebpf.NewProgramFromID(ebpf.ProgramID(filterID))
	if err != nil {
		t.Fatal(err)
	}
	defer byID.Close()

	rawtp, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tf_rawtp", Type: ebpf.RawTracepoint, Instructions: returnZero, License: "GPL"})
	if err != nil {
		t.Fatal(err)
	}
	defer rawtp.Close()
	rawtpID := progID(t, rawtp)
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "bpf_trace_printk", Program: rawtp})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	linfo, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	linkFD := l.(interface{ FD() int }).FD()
	// The same link opened again by id: the kernel names this fd
	// "bpf-link", the first "bpf_link".
	again, err := link.NewFromID(linfo.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	againFD := again.(interface{ FD() int }).FD()

	// A child holding the program: another process, seen from outside.
	// The os.File gets its own fd: it closes it when collected.
	dup, err := unix.Dup(byID.FD())
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "prog")
	defer f.Close()
	child := startHolder(t, f)

	self := os.Getpid()
	want := map[Entry]bool{
		{PID: uint32(self), FD: uint32(filter.FD()), Kind: KindProg, ProgID: filterID, Comm: comm(t, self)}:                      false,
		{PID: uint32(self), FD: uint32(byID.FD()), Kind: KindProg, ProgID: filterID, Comm: comm(t, self)}:                        false,
		{PID: uint32(self), FD: uint32(rawtp.FD()), Kind: KindProg, ProgID: rawtpID, Comm: comm(t, self)}:                        false,
		{PID: uint32(self), FD: uint32(linkFD), Kind: KindLink, ProgID: rawtpID, LinkID: uint32(linfo.ID), Comm: comm(t, self)}:  false,
		{PID: uint32(self), FD: uint32(againFD), Kind: KindLink, ProgID: rawtpID, LinkID: uint32(linfo.ID), Comm: comm(t, self)}: false,
		{PID: uint32(child), FD: 3, Kind: KindProg, ProgID: filterID, Comm: comm(t, child)}:                                      false,
	}
	seen := make(map[[2]uint32]int)
	var mine []Entry
	if err := it.Read(func(e Entry) {
		seen[[2]uint32{e.PID, e.FD}]++
		if _, ok := want[e]; ok {
			want[e] = true
		}
		if e.PID == uint32(self) || e.PID == uint32(child) {
			mine = append(mine, e)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for e, found := range want {
		if !found {
			t.Errorf("not reported: %+v", e)
		}
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("pid %d fd %d reported %d times (once per thread?)", k[0], k[1], n)
		}
	}
	// Everything reported for the two processes must agree with procfs.
	proc := make(map[Entry]bool)
	for _, pid := range []int{self, child} {
		if err := walkPid(pid, func(e Entry) { proc[e] = true }); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range mine {
		if !proc[e] {
			t.Errorf("iterator reports %+v, /proc fdinfo does not", e)
		}
		delete(proc, e)
	}
	for e := range proc {
		t.Errorf("/proc fdinfo reports %+v, the iterator does not", e)
	}
}

// walkProc is the baseline the iterator replaces: every process's fds
// from /proc, readlink to find bpf files, fdinfo for their ids.
func walkProc(fn func(Entry)) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		walkPid(pid, fn) // processes exit during the walk: ignore them
	}
	return nil
}

func walkPid(pid int, fn func(Entry)) error {
	dir := "/proc/" + strconv.Itoa(pid)
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return err
	}
	name := ""
	for _, d := range fds {
		target, err := os.Readlink(dir + "/fd/" + d.Name())
		if err != nil {
			continue
		}
		var kind Kind
		switch target {
		case "anon_inode:bpf-prog":
			kind = KindProg
		case "anon_inode:bpf_link", "anon_inode:bpf-link":
			kind = KindLink
		default:
			continue
		}
		info, err := os.ReadFile(dir + "/fdinfo/" + d.Name())
		if err != nil {
			continue
		}
		if name == "" {
			b, _ := os.ReadFile(dir + "/comm")
			name = strings.TrimSuffix(string(b), "\n")
		}
		fd, _ := strconv.Atoi(d.Name())
		fn(Entry{PID: uint32(pid), FD: uint32(fd), Kind: kind, ProgID: fdinfoField(info, "prog_id:"),
			LinkID: fdinfoField(info, "link_id:"), Comm: name})
	}
	return nil
}

func fdinfoField(info []byte, key string) uint32 {
	for line := range bytes.Lines(info) {
		if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
			n, _ := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32)
			return uint32(n)
		}
	}
	return 0
}

// holdFds makes this process hold n program fds, a node where a few
// tools hold many programs.
func holdFds(b *testing.B, n int) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tf_bench", Type: ebpf.SocketFilter, Instructions: returnZero, License: "GPL"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	for range n - 1 {
		c, err := p.Clone()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
	}
}

func BenchmarkRead(b *testing.B) {
	it := loadIter(b, false)
	holdFds(b, 1000)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := it.Read(func(Entry) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "entries")
}

// BenchmarkReadVsProcfs times the iterator and the /proc walk on the same
// node state in the same loop and reports their ratio, with this process
// holding 1 and 1,000 program fds on top of whatever the host has.
func BenchmarkReadVsProcfs(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("fds=%d", n), func(b *testing.B) { benchReadVsProcfs(b, n) })
	}
}

func benchReadVsProcfs(b *testing.B, fds int) {
	it := loadIter(b, false)
	holdFds(b, fds)
	var iterTime, procTime time.Duration
	var nIter, nProc int
	for b.Loop() {
		nIter, nProc = 0, 0
		t0 := time.Now()
		if err := it.Read(func(Entry) { nIter++ }); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := walkProc(func(Entry) { nProc++ }); err != nil {
			b.Fatal(err)
		}
		iterTime += t1.Sub(t0)
		procTime += time.Since(t1)
	}
	b.ReportMetric(float64(iterTime.Nanoseconds())/float64(b.N), "iter-ns/op")
	b.ReportMetric(float64(procTime.Nanoseconds())/float64(b.N), "procfs-ns/op")
	b.ReportMetric(float64(procTime)/float64(iterTime), "procfs/iter")
	b.ReportMetric(float64(nIter), "iter-entries")
	b.ReportMetric(float64(nProc), "procfs-entries")
}

// TestFindsPerfEvents: a program attached the legacy way
// (PERF_EVENT_IOC_SET_BPF, no bpf_link) is held by a perf_event fd alone;
// the iterator reports that fd, in this process and in a child that
// inherited it, with the program's id. A perf event without a program is
// not reported; a program attached through a perf_event link (Linux 5.15+)
// is reported by its link fd and by the perf_event fd beside it.
func TestFindsPerfEvents(t *testing.T) {
	for _, c := range []struct {
		name   string
		byName bool
	}{{"learned", false}, {"links-by-name", true}} {
		t.Run(c.name, func(t *testing.T) { testFindsPerfEvents(t, loadIter(t, c.byName)) })
	}
}

func testFindsPerfEvents(t *testing.T, it *Iter) {
	newTP := func(name string) (*ebpf.Program, uint32) {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.TracePoint, Instructions: returnZero, License: "GPL"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, progID(t, p)
	}
	legacy, legacyID := newTP("tf_perf_legacy")
	perf, err := perfattach.Tracepoint(legacy.FD(), "task", "task_rename")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(perf)
	bare, err := perfattach.Open("task", "task_rename")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bare)

	linked, linkedID := newTP("tf_perf_link")
	l, err := link.Tracepoint("task", "task_rename", linked, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, infoErr := l.Info()
	pe, err := l.(interface{ PerfEvent() (*os.File, error) }).PerfEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close() // a dup of the link's perf_event fd

	dup, err := unix.Dup(perf)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "perf")
	defer f.Close()
	child := startHolder(t, f)

	self := os.Getpid()
	want := map[Entry]bool{
		{PID: uint32(self), FD: uint32(perf), Kind: KindPerf, ProgID: legacyID, Comm: comm(t, self)}:    false,
		{PID: uint32(child), FD: 3, Kind: KindPerf, ProgID: legacyID, Comm: comm(t, child)}:             false,
		{PID: uint32(self), FD: uint32(pe.Fd()), Kind: KindPerf, ProgID: linkedID, Comm: comm(t, self)}: false,
	}
	var linkFD uint32
	if infoErr == nil {
		// A perf_event link: the link fd is reported as one.
		linkFD = uint32(l.(interface{ FD() int }).FD())
	} else {
		t.Logf("no perf_event bpf_link on this kernel, cilium/ebpf attached with the ioctl: %v", infoErr)
	}
	var gotLink bool
	if err := it.Read(func(e Entry) {
		if _, ok := want[e]; ok {
			want[e] = true
		}
		if e.PID == uint32(self) && e.FD == uint32(bare) {
			t.Errorf("a perf event without a program is reported: %+v", e)
		}
		if e.PID == uint32(self) && e.Kind == KindLink && e.FD == linkFD && e.ProgID == linkedID {
			gotLink = true
		}
		if e.Kind == KindPerf && e.LinkID != 0 {
			t.Errorf("perf_event fd with a link id: %+v", e)
		}
	}); err != nil {
		t.Fatal(err)
	}
	for e, found := range want {
		if !found {
			t.Errorf("not reported: %+v", e)
		}
	}
	if infoErr == nil && !gotLink {
		t.Errorf("the perf_event link fd %d of program %d is not reported", linkFD, linkedID)
	}
}
