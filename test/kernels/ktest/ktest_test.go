package ktest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/explain"
)

// statsOn is whether run_cnt/run_time_ns accrue: held for the whole binary
// through BPF_ENABLE_STATS, never through the sysctl.
var statsOn bool

func TestMain(m *testing.M) { MainWithStats(m, "ktest", &statsOn) }

// load reads the ktest spec armed for this process and loads only the
// objects named in objs, so one refused program does not take the others
// down.
func load(t *testing.T, feature string, objs any) { loadSpec(t, feature, loadKtest, objs) }

// loadSpec is load from the object read gives (ktest or ktestloop).
func loadSpec(t *testing.T, feature string, read func() (*ebpf.CollectionSpec, error), objs any) {
	t.Helper()
	spec, err := read()
	if err != nil {
		t.Fatalf("reading ktest spec: %v", err)
	}
	if v := spec.Variables["target_tgid"]; v != nil {
		if err := v.Set(uint32(os.Getpid())); err != nil {
			t.Fatalf("arming target_tgid: %v", err)
		}
	}
	if err := spec.LoadAndAssign(objs, nil); err != nil {
		expect.SkipUnlessExpected(t, feature, fmt.Errorf("loading: %w", err))
	}
}

func closeAll(t *testing.T, cs ...io.Closer) {
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
}

func stats(t *testing.T, p *ebpf.Program) *ebpf.ProgramStats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatalf("reading program stats: %v", err)
	}
	return s
}

func get(t *testing.T, v *ebpf.Variable) uint64 {
	t.Helper()
	var n uint64
	if err := v.Get(&n); err != nil {
		t.Fatalf("reading %s: %v", v, err)
	}
	return n
}

// deleteTwice deletes key 0 twice from user space; the key is absent, which
// still runs htab_map_delete_elem.
func deleteTwice(t *testing.T, m *ebpf.Map) {
	t.Helper()
	for i := 0; i < 2; i++ {
		if err := m.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("deleting from %v: %v", m, err)
		}
	}
}

// deleteObjs are the objects of the htab_map_delete_elem recursion scenario.
type deleteObjs struct {
	Outer     *ebpf.Map      `ebpf:"hash_outer"`
	Inner     *ebpf.Map      `ebpf:"hash_inner"`
	OuterRuns *ebpf.Variable `ebpf:"outer_runs"`
	InnerRuns *ebpf.Variable `ebpf:"inner_runs"`
}

// testDeleteRecursion is the recursion scenario for fentry and fexit on
// htab_map_delete_elem: deletes from the outer map run the program without
// a miss; each delete from the inner map makes the program delete from it
// again, which recurses once and is exactly one miss.
func testDeleteRecursion(t *testing.T, feature string, prog *ebpf.Program, o *deleteObjs) {
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		expect.SkipUnlessExpected(t, feature, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	s0 := stats(t, prog)
	deleteTwice(t, o.Outer)
	s1 := stats(t, prog)
	if n := get(t, o.OuterRuns); n != 2 {
		t.Errorf("program counted %d deletes from the outer map, want 2", n)
	}
	if d := s1.RecursionMisses - s0.RecursionMisses; d != 0 {
		t.Errorf("kernel counted %d recursion misses for non-recursive runs, want 0", d)
	}
	if statsOn {
		if d := s1.RunCount - s0.RunCount; d != 2 {
			t.Errorf("kernel counted %d runs for two outer deletes, want 2", d)
		}
	}
	// Without the guard the inner delete recurses until the kernel stack
	// overflows (5.10: "BUG: stack guard page was hit", a panic): there only
	// the non-recursing runs above and the scan of them are checked, and
	// the recursing part is a skip that says why.
	if err := canary.RecursionGuard(); err != nil {
		checkScan(t, feature, prog, feature)
		t.Run("recursing", func(t *testing.T) { expect.SkipUnlessExpected(t, expect.FeatRecursionGuard, err) })
		return
	}
	deleteTwice(t, o.Inner)
	s2 := stats(t, prog)
	if n := get(t, o.InnerRuns); n != 2 {
		t.Errorf("program counted %d deletes from the inner map, want 2 (the nested ones must be skipped)", n)
	}
	if d := s2.RecursionMisses - s1.RecursionMisses; d != 2 {
		t.Errorf("kernel counted %d recursion misses for two recursing deletes, want 2", d)
	}
	if statsOn {
		if d := s2.RunCount - s0.RunCount; d != 4 {
			t.Errorf("kernel counted %d runs, want 4 (2 outer + 2 inner, nested runs skipped)", d)
		}
	}
	metric(t, feature+".recursion_misses", s2.RecursionMisses-s0.RecursionMisses)
	metric(t, feature+".runs", s2.RunCount-s0.RunCount)
	checkScan(t, feature, prog, feature)
	t.Run("explained", func(t *testing.T) {
		explain.Misses(t, ProgramID(t, prog), 2, agent.CauseRecursion, agent.ContextTask, func() { deleteTwice(t, o.Inner) })
	})
}

func TestFentryRecursion(t *testing.T) {
	var objs struct {
		deleteObjs
		Prog *ebpf.Program `ebpf:"fentry_delete"`
	}
	load(t, expect.FeatFentry, &objs)
	closeAll(t, objs.Prog, objs.Outer, objs.Inner)
	testDeleteRecursion(t, expect.FeatFentry, objs.Prog, &objs.deleteObjs)
}

func TestFexitRecursion(t *testing.T) {
	var objs struct {
		deleteObjs
		Prog *ebpf.Program `ebpf:"fexit_delete"`
	}
	load(t, expect.FeatFexit, &objs)
	closeAll(t, objs.Prog, objs.Outer, objs.Inner)
	testDeleteRecursion(t, expect.FeatFexit, objs.Prog, &objs.deleteObjs)
}

// TestTpBtfRecursion: the canary's every run is one genuine recursion miss
// through bpf_trace_printk.
func TestTpBtfRecursion(t *testing.T) {
	c, err := canary.Load()
	if err != nil {
		expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
	}
	closeAll(t, c)
	m0, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	if err := c.Trigger(n); err != nil {
		t.Fatal(err)
	}
	m1, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	runs, err := c.TargetRuns()
	if err != nil {
		t.Fatal(err)
	}
	if runs != n || m1-m0 != n {
		t.Errorf("canary: %d runs and %d recursion misses after %d triggers, want %d of each", runs, m1-m0, n, n)
	}
	metric(t, "tp_btf.recursion_misses", m1-m0)
	id, err := c.ProgramID()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		t.Fatalf("opening canary %d: %v", id, err)
	}
	closeAll(t, p)
	checkScan(t, expect.FeatTpBtf, p, expect.FeatTpBtf)
	t.Run("explained", func(t *testing.T) {
		explain.Misses(t, id, n, agent.CauseRecursion, agent.ContextTask, func() {
			if err := c.Trigger(n); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestFmodRet runs the fmod_ret program on bpf_modify_return_test, which
// BPF_PROG_TEST_RUN of the program itself calls once per run.
func TestFmodRet(t *testing.T) {
	var objs struct {
		Prog *ebpf.Program  `ebpf:"fmod_ret_test"`
		Runs *ebpf.Variable `ebpf:"fmod_ret_runs"`
	}
	load(t, expect.FeatFmodRet, &objs)
	closeAll(t, objs.Prog)
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatFmodRet, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	s0 := stats(t, objs.Prog)
	const n = 3
	for i := 0; i < n; i++ {
		if _, err := objs.Prog.Run(&ebpf.RunOptions{}); err != nil {
			t.Fatalf("BPF_PROG_TEST_RUN of fmod_ret: %v", err)
		}
	}
	s1 := stats(t, objs.Prog)
	checkRuns(t, expect.FeatFmodRet, get(t, objs.Runs), n, s0, s1)
	checkScan(t, expect.FeatFmodRet, objs.Prog, expect.FeatFmodRet)
}

// checkRuns holds the program's own count and the kernel's run_cnt against
// the number of triggers.
func checkRuns(t *testing.T, feature string, own, n uint64, s0, s1 *ebpf.ProgramStats) {
	t.Helper()
	if own != n {
		t.Errorf("%s program counted %d runs for %d triggers", feature, own, n)
	}
	if statsOn && s1.RunCount-s0.RunCount < n {
		t.Errorf("kernel counted %d runs for %d triggers", s1.RunCount-s0.RunCount, n)
	}
	if d := s1.RecursionMisses - s0.RecursionMisses; d != 0 {
		t.Errorf("kernel counted %d recursion misses, want 0", d)
	}
	metric(t, feature+".runs", s1.RunCount-s0.RunCount)
}

// TestFentrySleepable attaches fentry.s to the arch's getpgid syscall.
func TestFentrySleepable(t *testing.T) {
	var objs struct {
		Prog *ebpf.Program  `ebpf:"fentry_s_getpgid"`
		Runs *ebpf.Variable `ebpf:"getpgid_runs"`
	}
	load(t, expect.FeatFentrySleep, &objs)
	closeAll(t, objs.Prog)
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatFentrySleep, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	s0 := stats(t, objs.Prog)
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := unix.Getpgid(0); err != nil {
			t.Fatalf("getpgid: %v", err)
		}
	}
	s1 := stats(t, objs.Prog)
	checkRuns(t, expect.FeatFentrySleep, get(t, objs.Runs), n, s0, s1)
	checkScan(t, expect.FeatFentrySleep, objs.Prog, expect.FeatFentrySleep)
}

// TestLSM attaches to the file_open hook and opens files.
func TestLSM(t *testing.T) {
	var objs struct {
		Prog *ebpf.Program  `ebpf:"lsm_file_open"`
		Runs *ebpf.Variable `ebpf:"file_open_runs"`
	}
	load(t, expect.FeatLSM, &objs)
	closeAll(t, objs.Prog)
	l, err := link.AttachLSM(link.LSMOptions{Program: objs.Prog})
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatLSM, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	s0 := stats(t, objs.Prog)
	const n = 4
	for i := 0; i < n; i++ {
		f, err := os.Open("/proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	s1 := stats(t, objs.Prog)
	own := get(t, objs.Runs)
	if own == 0 && expect.Expected(expect.FeatLSM) {
		t.Fatalf("lsm/file_open attached but never ran on %s: is bpf in the kernel's lsm= list?", expect.Entry())
	} else if own == 0 {
		t.Skipf("lsm/file_open attached but never ran: the bpf LSM is not enabled (lsm=)")
	}
	checkRuns(t, expect.FeatLSM, own, n, s0, s1)
	checkScan(t, expect.FeatLSM, objs.Prog, expect.FeatLSM)
}

// TestKprobeMissed attaches a kprobe to htab_map_update_elem and updates a
// hash map from user space: the syscall holds bpf_prog_active around the
// update, so the kernel skips the program every time. Since Linux 6.7 each
// skip adds to the program's recursion_misses and kprobe link info carries
// a missed field; older kernels count nothing and report no field.
func TestKprobeMissed(t *testing.T) {
	var objs struct {
		Prog *ebpf.Program  `ebpf:"kprobe_update"`
		Map  *ebpf.Map      `ebpf:"hash_kprobe"`
		Runs *ebpf.Variable `ebpf:"kprobe_runs"`
	}
	load(t, expect.FeatKprobe, &objs)
	closeAll(t, objs.Prog, objs.Map)
	l, err := link.Kprobe("htab_map_update_elem", objs.Prog, nil)
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatKprobe, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, l)
	s0 := stats(t, objs.Prog)
	runs0 := get(t, objs.Runs)
	const n = 3
	for i := 0; i < n; i++ {
		if err := objs.Map.Update(uint32(0), uint32(i), ebpf.UpdateAny); err != nil {
			t.Fatalf("updating hash map: %v", err)
		}
	}
	s1 := stats(t, objs.Prog)
	misses := s1.RecursionMisses - s0.RecursionMisses
	ran := get(t, objs.Runs) - runs0

	var linkMissed *uint64
	info, infoErr := l.Info()
	// Before Linux 5.15 there is no perf_event bpf_link: cilium/ebpf
	// attaches with PERF_EVENT_IOC_SET_BPF, and only the perf_event fd
	// holds the attachment.
	legacy := errors.Is(infoErr, ebpf.ErrNotSupported)
	if infoErr == nil {
		if pe := info.PerfEvent(); pe != nil {
			if kp := pe.Kprobe(); kp != nil {
				linkMissed = &kp.Missed
				if kp.Function != "htab_map_update_elem" {
					t.Errorf("kprobe link info names %q, want htab_map_update_elem", kp.Function)
				}
			}
		}
	} else {
		t.Logf("reading kprobe link info: %v", infoErr)
	}
	if ran != 0 {
		t.Errorf("kprobe ran %d times inside user-space map updates, want 0 (bpf_prog_active is held there)", ran)
	}
	lm := "absent"
	if linkMissed != nil {
		lm = fmt.Sprint(*linkMissed)
	}
	t.Logf("kprobe on htab_map_update_elem (%s): %d updates, recursion_misses +%d, link missed %s", runtime.GOARCH, n, misses, lm)
	metric(t, "kprobe.recursion_misses", misses)
	metric(t, "kprobe.link_missed", lm)
	// The agent as it runs by default, owners found: a kprobe attached
	// without a link has its attachment from the owner walk.
	p := checkScanWith(t, ownersConfig(true), expect.FeatKprobe, objs.Prog, expect.FeatKprobe)
	if legacy {
		checkNoLink(t, p)
	} else {
		checkLinkMissed(t, p, linkMissed)
	}
	checkKprobeOwned(t, p, "htab_map_update_elem")
	// The /proc walk finds the same, where the iterator is not used.
	checkKprobeOwned(t, scanWith(t, ProgramID(t, objs.Prog), ownersConfig(false)), "htab_map_update_elem")
	switch {
	case misses == n && linkMissed != nil:
		// 6.7+: counted and reported.
	case expect.Expected(expect.FeatKprobeMissed):
		t.Fatalf("%s: kernel counted %d skipped kprobe runs for %d (link missed %s), want %d and a missed field", expect.Entry(), misses, n, lm, n)
	case misses == 0 && linkMissed == nil:
		t.Skipf("kprobe missed: absent on this kernel (skipped runs not counted, no missed field in link info)")
	default:
		t.Errorf("inconsistent: recursion_misses +%d for %d skipped runs, link missed %s", misses, n, lm)
	}
	// The map update from user space holds bpf_prog_active: another
	// holder, not the kprobe program, turned each run away.
	update := func() {
		for i := 0; i < n; i++ {
			if err := objs.Map.Update(uint32(0), uint32(i), ebpf.UpdateAny); err != nil {
				t.Fatalf("updating hash map: %v", err)
			}
		}
	}
	t.Run("explained", func(t *testing.T) {
		explain.Misses(t, ProgramID(t, objs.Prog), n, agent.CauseNested, agent.ContextTask, update)
	})
	// Where watchpoints do not fire in a kprobe handler (arm64), the agent
	// learns it and frees the program's slot; elsewhere it keeps watching.
	t.Run("blind", func(t *testing.T) {
		explain.Blind(t, ProgramID(t, objs.Prog), expect.Expected(expect.FeatMissWatchKprobe), update)
	})
}

// checkNoLink holds a program attached the legacy way (no perf_event
// bpf_link) to having no link in bpfleet's scan, and so no link id and no
// link missed: absent, not zero.
func checkNoLink(t *testing.T, p agent.ProgramStat) {
	t.Helper()
	if len(p.Links) != 0 {
		t.Errorf("bpfleet shows %d links %+v for a kprobe attached without a bpf_link, want none", len(p.Links), p.Links)
	}
}

// checkKprobeOwned holds bpfleet's scan of the kprobe program this test
// attached to fn: attach type kprobe, target fn and this process among its
// owners. Attached without a bpf_link (legacy) or with a link whose info
// has no probe details, the target comes from the kernel's answer about
// the perf_event fd.
func checkKprobeOwned(t *testing.T, p agent.ProgramStat, fn string) {
	t.Helper()
	if p.AttachType != "kprobe" {
		t.Errorf("bpfleet classifies program %d as %q, want kprobe", p.ID, p.AttachType)
	}
	// Without a link, or with one whose info does not describe the
	// probe (before 6.6), the target comes from the perf_event fd.
	if p.AttachTarget != fn {
		t.Errorf("bpfleet names the target of program %d %q, want %s", p.ID, p.AttachTarget, fn)
	}
	self := slices.IndexFunc(p.Owners, func(o agent.Owner) bool { return o.PID == os.Getpid() })
	if self < 0 {
		t.Errorf("bpfleet's owners of program %d %+v lack this process (%d)", p.ID, p.Owners, os.Getpid())
	}
	t.Logf("bpfleet: kprobe program %d attach %q target %q, %d links, owners %+v", p.ID, p.AttachType, p.AttachTarget, len(p.Links), p.Owners)
}

// checkLinkMissed holds bpfleet's kprobe link missed against the kernel's
// link info: the same number where the kernel has the field, absent (nil)
// where it has none.
func checkLinkMissed(t *testing.T, p agent.ProgramStat, kernel *uint64) {
	t.Helper()
	if len(p.Links) != 1 {
		t.Errorf("bpfleet shows %d links for the kprobe program, want 1", len(p.Links))
		return
	}
	got := p.Links[0].Missed
	switch {
	case kernel == nil && got != nil:
		t.Errorf("bpfleet reports link missed %d where the kernel has no such field", *got)
	case kernel != nil && got == nil:
		t.Errorf("bpfleet reports link missed absent; the kernel says %d", *kernel)
	case kernel != nil && *got != *kernel:
		t.Errorf("bpfleet reports link missed %d; the kernel says %d", *got, *kernel)
	}
}

// metric logs a number the harness compares across the kernels of one
// release (amd64 against arm64): "metric <name>=<value>".
func metric(t *testing.T, name string, v any) {
	t.Helper()
	t.Logf("metric %s=%v", name, v)
}

// kprobeMissed reads the kprobe's own missed counter from its link info;
// nil when the kernel's link info has no kprobe details (before 6.6) .
func kprobeMissed(t *testing.T, l link.Link) *uint64 {
	t.Helper()
	info, err := l.Info()
	if err != nil {
		t.Logf("reading kprobe link info: %v", err)
		return nil
	}
	if pe := info.PerfEvent(); pe != nil {
		if kp := pe.Kprobe(); kp != nil {
			return &kp.Missed
		}
	}
	return nil
}

// TestKprobeLinkMissed provokes the kprobe link's own missed counter: a
// kprobe program on getpgid deletes from a hash map, re-entering a second
// kprobe on htab_map_delete_elem, which the kprobe framework skips.
func TestKprobeLinkMissed(t *testing.T) {
	var objs struct {
		Outer *ebpf.Program `ebpf:"kprobe_getpgid"`
		Inner *ebpf.Program `ebpf:"kprobe_delete"`
		Map   *ebpf.Map     `ebpf:"hash_nested"`
	}
	load(t, expect.FeatKprobe, &objs)
	closeAll(t, objs.Outer, objs.Inner, objs.Map)
	inner, err := link.Kprobe("htab_map_delete_elem", objs.Inner, nil)
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatKprobe, fmt.Errorf("attaching: %w", err))
	}
	closeAll(t, inner)
	sym := map[string]string{"amd64": "__x64_sys_getpgid", "arm64": "__arm64_sys_getpgid"}[runtime.GOARCH]
	outer, err := link.Kprobe(sym, objs.Outer, nil)
	if err != nil {
		expect.SkipUnlessExpected(t, expect.FeatKprobe, fmt.Errorf("attaching to %s: %w", sym, err))
	}
	closeAll(t, outer)
	m0 := kprobeMissed(t, inner)
	const n = 4
	for i := 0; i < n; i++ {
		if _, err := unix.Getpgid(0); err != nil {
			t.Fatalf("getpgid: %v", err)
		}
	}
	m1 := kprobeMissed(t, inner)
	if m0 == nil || m1 == nil {
		metric(t, "kprobe_nested.link_missed", "absent")
		if expect.Expected(expect.FeatKprobeMissed) {
			t.Fatalf("%s: kprobe link info has no missed field", expect.Entry())
		}
		t.Skipf("kprobe link missed: absent on this kernel (no kprobe details in link info)")
	}
	metric(t, "kprobe_nested.link_missed", *m1-*m0)
	if *m1-*m0 != n {
		t.Errorf("nested kprobe: link missed +%d for %d re-entries, want %d", *m1-*m0, n, n)
	}
	id := linkID(t, inner)
	rec := iterRecord(t, id)
	nest, maxa, ok := rec.MissedSplit()
	if !ok {
		t.Fatalf("the bpf_link iterator does not split link %d's missed (known %v, split %v)", id, rec.Known, rec.Split)
	}
	metric(t, "kprobe_nested.iter_nesting", nest)
	metric(t, "kprobe_nested.iter_maxactive", maxa)
	if nest != *m1 || maxa != 0 {
		t.Errorf("iterator: nested kprobe link %d missed split nesting %d + maxactive %d; want %d + 0 (the kernel's missed)", id, nest, maxa, *m1)
	}
	p := checkScan(t, "kprobe_nested", objs.Inner, expect.FeatKprobe)
	checkLinkMissed(t, p, m1)
	checkLinkSplit(t, "kprobe_nested", p, *m1, 0)
}
