package agent

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	testcounters "github.com/bpfleet/bpfleet/test/counters"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

func newTestAgent(t *testing.T) *Agent {
	t.Helper()
	return newTestAgentWith(t, Config{StatsMode: StatsAlways})
}

func newTestAgentWith(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func scan(t *testing.T, a *Agent) *Snapshot {
	t.Helper()
	s, err := a.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findProg(s *Snapshot, id uint32) *ProgramStat {
	for i := range s.Programs {
		if s.Programs[i].ID == id {
			return s.Programs[i]
		}
	}
	return nil
}

// TestGenuineRecursionMiss: each canary trigger is one genuine recursion
// miss; bpfleet must report exactly the kernel's own counter, as a delta, a
// cumulative value and an episode.
func TestGenuineRecursionMiss(t *testing.T) {
	// Quiet episodes must not close while we wait for the unload below.
	a := newTestAgentWith(t, Config{StatsMode: StatsAlways, QuietIntervals: 1000})
	c, id := canarytest.Load(t)
	s0 := scan(t, a)
	p0 := findProg(s0, id)
	if p0 == nil {
		t.Fatalf("canary prog %d not in scan", id)
	}
	if p0.AttachType != "tp_btf" || p0.AttachTarget != "bpf_trace_printk" {
		t.Errorf("canary attach = %q %q, want tp_btf bpf_trace_printk", p0.AttachType, p0.AttachTarget)
	}
	if p0.Type != "tracing" {
		t.Errorf("canary type = %q, want tracing", p0.Type)
	}

	const n = 7
	if err := c.Trigger(n); err != nil {
		t.Fatal(err)
	}
	s1 := scan(t, a)
	kernel, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	p1 := findProg(s1, id)
	if p1 == nil {
		t.Fatalf("canary prog %d not in second scan", id)
	}
	if p1.RecursionMisses == nil {
		t.Fatal("recursion_misses reported absent on a kernel that has it")
	}
	if *p1.RecursionMisses != kernel || kernel != n {
		t.Errorf("recursion_misses = %d, kernel says %d, triggers %d", *p1.RecursionMisses, kernel, n)
	}
	if p1.Delta.Misses != n {
		t.Errorf("interval misses = %d, want %d", p1.Delta.Misses, n)
	}
	if p1.Delta.Runs < n {
		t.Errorf("interval runs = %d, want at least %d (stats on)", p1.Delta.Runs, n)
	}
	var ep *Episode
	for i := range s1.Episodes {
		if s1.Episodes[i].ProgID == id {
			ep = &s1.Episodes[i]
		}
	}
	// The kind follows from the kernel's preemption model (table-tested in
	// TestMissKind); here: the episode carries its program's kind.
	if want := missKind(&p1.Program, &s1.Kernel); ep == nil || !ep.Open || ep.Misses != n || ep.Kind != want {
		t.Fatalf("episode for canary = %+v, want open with %d misses, kind %s (preempt %s %q)", ep, n, want, s1.Kernel.Preempt, s1.Kernel.PreemptMode)
	}
	var at *AttachTypeStat
	for i := range s1.AttachTypes {
		if s1.AttachTypes[i].AttachType == "tp_btf" {
			at = &s1.AttachTypes[i]
		}
	}
	if at == nil || at.Delta.Misses < n || at.RecursionMisses == nil || *at.RecursionMisses < kernel {
		t.Errorf("tp_btf aggregate = %+v, want at least the canary's misses", at)
	}

	// Unload between scans: the program disappears and its episode closes.
	// The kernel frees a detached program after an RCU grace period, so
	// the id may linger for a few scans.
	c.Close()
	var s2 *Snapshot
	for i := 0; i < 100; i++ {
		if s2 = scan(t, a); findProg(s2, id) == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if findProg(s2, id) != nil {
		t.Fatalf("unloaded canary %d still reported after 2s", id)
	}
	var closed *Episode
	for i := range s2.Episodes {
		if s2.Episodes[i].ProgID == id {
			closed = &s2.Episodes[i]
		}
	}
	if closed == nil || closed.Open || closed.Reason != "vanished" || closed.Misses != n {
		t.Errorf("episode after unload = %+v, want closed, vanished, %d misses", closed, n)
	}
}

// TestExactRunCounts: raw_tp, tp_btf and tracepoint programs on a
// tracepoint only this process fires; bpfleet's run counts and deltas must
// equal the kernel's and the triggers.
func TestExactRunCounts(t *testing.T) {
	a := newTestAgent(t)
	if !scan(t, a).Stats.Enabled {
		t.Fatal("stats not enabled although the agent asked for them")
	}
	set, err := testcounters.Load()
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	ids := map[string]uint32{}
	for name, p := range set.Programs() {
		ids[name] = scantest.ProgID(t, p)
	}
	trig := scantest.ProgID(t, set.TriggerProgram())
	s0 := scan(t, a)
	const n = 40
	if err := set.Trigger(n); err != nil {
		t.Fatal(err)
	}
	s1 := scan(t, a)
	hits, err := set.Hits()
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range ids {
		p0, p1 := findProg(s0, id), findProg(s1, id)
		if p0 == nil || p1 == nil {
			t.Fatalf("%s prog %d missing from scans", name, id)
		}
		if p1.AttachType != name {
			t.Errorf("prog %d attach type = %q, want %q", id, p1.AttachType, name)
		}
		if p1.AttachTarget != "bpf_test_finish" && !(name == "tracepoint" && p1.AttachTarget == "bpf_test_run:bpf_test_finish") {
			t.Errorf("%s target = %q", name, p1.AttachTarget)
		}
		if hits[name] != n {
			t.Errorf("%s: program counted %d hits from this process, want %d", name, hits[name], n)
		}
		// Another process's skb test runs would add runs too; on a quiet
		// kernel the delta is exact, and never less than the triggers.
		if p1.Delta.Runs < n {
			t.Errorf("%s: delta runs %d < %d triggers", name, p1.Delta.Runs, n)
		}
		st, err := set.Programs()[name].Stats()
		if err != nil {
			t.Fatal(err)
		}
		if p1.RunCount > st.RunCount || p1.RunCount < p0.RunCount+n {
			t.Errorf("%s: run_count %d, kernel now %d, before %d", name, p1.RunCount, st.RunCount, p0.RunCount)
		}
		if p1.Delta.Runs > 0 && p1.RunTimeNs == 0 {
			t.Errorf("%s: runs without run time while stats are on", name)
		}
	}
	if p := findProg(s1, trig); p == nil || p.Delta.Runs != n || p.Type != "socket_filter" {
		t.Errorf("trigger program = %+v, want exactly %d runs", p, n)
	}
}

func TestFieldsAndNoFdKept(t *testing.T) {
	a := newTestAgent(t)
	_, id := canarytest.Load(t)
	scan(t, a) // the first scan may load the agent's own iterator (its fds stay)
	before := countFDs(t)
	s := scan(t, a)
	if after := countFDs(t); after != before {
		t.Errorf("scan left BPF fds open: %d before, %d after", before, after)
	}
	p := findProg(s, id)
	if p == nil {
		t.Fatal("canary missing")
	}
	if p.Name != "canary" || len(p.Tag) != 16 || p.VerifiedInsns == nil || p.Memlock == nil || *p.Memlock == 0 || p.UID == nil || p.JitedSize == 0 {
		t.Errorf("program fields incomplete: %+v", p.Program)
	}
	if len(p.MapIDs) == 0 {
		t.Errorf("canary uses a .bss map, no map ids reported")
	}
	if p.LoadTime.IsZero() || s.Time.Sub(p.LoadTime) < 0 || s.Time.Sub(p.LoadTime).Minutes() > 5 {
		t.Errorf("load time %v not within the test's run (scan at %v)", p.LoadTime, s.Time)
	}
	if len(p.Links) != 1 || p.Links[0].Type != "raw_tracepoint" {
		t.Errorf("links = %+v", p.Links)
	}
	// The bpf_prog iterator loads here (tp_btf is a tracing program) and
	// knows the canary is not sleepable.
	if d := unexpectedDegraded(t, s.Degraded); len(d) > 0 {
		t.Errorf("agent degraded on the host: %v", d)
	}
	if p.Sleepable == nil || *p.Sleepable {
		t.Errorf("canary sleepable = %v, want known false", p.Sleepable)
	}
}

// unexpectedDegraded is degraded without what the host makes true even for
// a test running as root: the owners line when some process has a
// capability this one lacks (a sandbox's init does here), so that its fds
// are beyond a ptrace-mode check.
func unexpectedDegraded(t *testing.T, degraded []string) []string {
	t.Helper()
	var out []string
	for _, d := range degraded {
		if strings.HasPrefix(d, FeatureOwners+": ") {
			if pid := moreCapable(t); pid != 0 {
				t.Logf("%s (pid %d has capabilities this test lacks)", d, pid)
				continue
			}
		}
		out = append(out, d)
	}
	return out
}

// moreCapable returns a process whose effective capabilities are not a
// subset of this one's, 0 if none.
func moreCapable(t *testing.T) int {
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := capEff(string(own))
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		if eff, ok := capEff(string(b)); ok && eff&^mine != 0 {
			return pid
		}
	}
	return 0
}

// countFDs counts this process's BPF program and link fds.
func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "anon_inode:bpf") {
			n++
		}
	}
	return n
}

// TestOwnerIsTestProcess: the process holding the canary (this test) is
// found as its owner, through the task_file iterator and through the
// /proc walk alike.
func TestOwnerIsTestProcess(t *testing.T) {
	_, id := canarytest.Load(t)
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	for _, noIter := range []bool{false, true} {
		a := newTestAgentWith(t, Config{Owners: true, OwnerIterator: !noIter})
		s := scan(t, a)
		if !s.Scan.OwnersRefreshed {
			t.Error("first scan did not read owners")
		}
		if d := unexpectedDegraded(t, s.Degraded); len(d) > 0 {
			t.Errorf("noIterator=%v: degraded: %v", noIter, d)
		}
		p := findProg(s, id)
		if p == nil {
			t.Fatal("canary missing")
		}
		var found *Owner
		for i := range p.Owners {
			if p.Owners[i].PID == os.Getpid() {
				found = &p.Owners[i]
			}
		}
		if found == nil {
			t.Fatalf("noIterator=%v: test process %d not among owners %+v", noIter, os.Getpid(), p.Owners)
		}
		if found.Comm != strings.TrimSpace(string(comm)) || found.Via != "fd" {
			t.Errorf("owner = %+v, want comm %q via fd", found, strings.TrimSpace(string(comm)))
		}
		// Later scans (refreshed or from the cache: other tools' programs
		// come and go on this kernel) keep the owner.
		if p2 := findProg(scan(t, a), id); p2 == nil || len(p2.Owners) != len(p.Owners) {
			t.Error("owners lost on the second scan")
		}
	}
}

// TestFirstReadMemlockAndFiles: a first read of many programs of two sizes,
// sequential and spread over goroutines, reports each one's memlock as its
// own fdinfo does (the reused fdinfo files must never show a neighbour's)
// and leaves no file open behind it.
func TestFirstReadMemlockAndFiles(t *testing.T) {
	// One page and two pages of memlock, interleaved.
	sizes := []int{2, 700}
	want := map[uint32]uint64{}
	for i := range 4 * 64 { // four of the reader's read batches (readBatch)
		insns := asm.Instructions{}
		for range sizes[i%2] - 2 {
			insns = append(insns, asm.Mov.Imm(asm.R1, 0))
		}
		insns = append(insns, asm.Mov.Imm(asm.R0, 0), asm.Return())
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "MIT", Name: "memlock_test", Instructions: insns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", p.FD()))
		if err != nil {
			t.Fatal(err)
		}
		m, ok := bpfsys.Field(b, "memlock:")
		if !ok {
			t.Fatalf("no memlock in fdinfo:\n%s", b)
		}
		want[scantest.ProgID(t, p)] = m
	}
	distinct := map[uint64]bool{}
	for _, m := range want {
		distinct[m] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("programs of %v instructions all have memlock %v: the test needs two sizes", sizes, distinct)
	}
	for _, parallel := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("parallel=%d", parallel), func(t *testing.T) {
			a := newTestAgentWith(t, Config{Parallel: parallel, NoIterator: true})
			before := countOpenFiles(t)
			s := scan(t, a)
			// +2: /proc/self/fdinfo and kernel.bpf_stats_enabled, held by the agent
			if after := countOpenFiles(t); after != before+2 {
				t.Errorf("first read left files open: %d before, %d after", before, after)
			}
			seen := 0
			for id, m := range want {
				p := findProg(s, id)
				if p == nil {
					t.Errorf("program %d missing", id)
					continue
				}
				seen++
				if p.Memlock == nil || *p.Memlock != m {
					t.Errorf("program %d memlock %v, its fdinfo says %d", id, p.Memlock, m)
				}
			}
			if seen != len(want) {
				t.Errorf("saw %d of %d programs", seen, len(want))
			}
		})
	}
}

// countOpenFiles counts this process's open fds.
func countOpenFiles(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestEarlyOwnerWalkRefreshesOnce: the first scan reads owners beside the
// programs, so a program loaded while that walk ran could lack its owner;
// the second scan therefore walks again, and a third (with no program
// newer than the second's) does not.
func TestEarlyOwnerWalkRefreshesOnce(t *testing.T) {
	scantest.LoadPrograms(t, 1) // a program to attribute, on an otherwise idle kernel
	a := newTestAgentWith(t, Config{Owners: true})
	maxID := func(s *Snapshot) uint32 {
		var m uint32
		for i := range s.Programs {
			m = max(m, s.Programs[i].ID)
		}
		return m
	}
	s1 := scan(t, a)
	s2 := scan(t, a)
	s3 := scan(t, a)
	if !s1.Scan.OwnersRefreshed || !s2.Scan.OwnersRefreshed {
		t.Errorf("owners refreshed: first scan %v, second %v; want both", s1.Scan.OwnersRefreshed, s2.Scan.OwnersRefreshed)
	}
	if newer := maxID(s3) > maxID(s2); s3.Scan.OwnersRefreshed != newer {
		t.Errorf("third scan refreshed owners = %v with a program newer than the second's = %v", s3.Scan.OwnersRefreshed, newer)
	}
}

// TestOneShotHidesOwnIterators: a one-shot scan that loads its own
// iterators (from the CO-RE cache an agent wrote) does not list them: they
// live as long as the command. Everything else it lists.
func TestOneShotHidesOwnIterators(t *testing.T) {
	cache := t.TempDir()
	newTestAgentWith(t, Config{ProcRoot: "/proc", Owners: true, OwnerIterator: true, CacheDir: cache}).Close()
	held := scantest.LoadPrograms(t, 3)
	a := newTestAgentWith(t, Config{ProcRoot: "/proc", BPFFS: []string{t.TempDir()}, Owners: true, CacheDir: cache, OneShot: true})
	s := scan(t, a)
	if s.Scan.Source != ScanSourceIterator || s.Scan.OwnersSource != OwnersSourceIterator {
		t.Skipf("no iterators from the CO-RE cache here: scan %+v", s.Scan)
	}
	own := []uint32{a.r.OwnProgram(), a.attr.ownProgram()}
	if own[0] == 0 || own[1] == 0 {
		t.Fatalf("own iterator programs %v: want the stats and task_file iterators' ids", own)
	}
	for _, id := range own {
		if findProg(s, id) != nil {
			t.Errorf("the scan lists its own iterator program %d", id)
		}
	}
	for _, p := range held {
		if id := scantest.ProgID(t, p); findProg(s, id) == nil {
			t.Errorf("program %d missing", id)
		}
	}
	if s.Scan.Programs != len(s.Programs) {
		t.Errorf("scan.programs %d, %d listed", s.Scan.Programs, len(s.Programs))
	}
}
