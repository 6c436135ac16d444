package progiter

import (
	"errors"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

func loadIter(tb testing.TB) *Iter {
	tb.Helper()
	it, _, err := LoadCached("")
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel refuses iter/bpf_prog: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { it.Close() })
	return it
}

// returnZero is the smallest valid program body of any type.
var returnZero = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

type loaded struct {
	name string
	prog *ebpf.Program
	spec *ebpf.ProgramSpec
	id   uint32
	typ  uint32 // from bpf_prog_info, independent of the iterator
}

func load(t *testing.T, spec *ebpf.ProgramSpec) (loaded, error) {
	t.Helper()
	spec.Instructions = returnZero
	spec.License = "GPL"
	p, err := ebpf.NewProgram(spec)
	if err != nil {
		return loaded{}, err
	}
	t.Cleanup(func() { p.Close() })
	info, err := p.Info()
	if err != nil {
		t.Fatalf("reading info of %s: %v", spec.Name, err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatalf("kernel gives no id for %s", spec.Name)
	}
	return loaded{name: spec.Name, prog: p, spec: spec, id: uint32(id), typ: uint32(info.Type)}, nil
}

func mustLoad(t *testing.T, spec *ebpf.ProgramSpec) loaded {
	t.Helper()
	l, err := load(t, spec)
	if err != nil {
		t.Fatalf("loading %s: %v", spec.Name, err)
	}
	return l
}

func TestReadClassifiesPrograms(t *testing.T) {
	it := loadIter(t)

	progs := []loaded{
		mustLoad(t, &ebpf.ProgramSpec{Name: "pi_sockfilter", Type: ebpf.SocketFilter}),
		mustLoad(t, &ebpf.ProgramSpec{Name: "pi_rawtp", Type: ebpf.RawTracepoint}),
		mustLoad(t, &ebpf.ProgramSpec{Name: "pi_tpbtf", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "bpf_trace_printk"}),
	}
	// BPF_PROG_TYPE_SYSCALL programs are always sleepable, and unlike
	// fentry.s they load on kernels that refuse trampolines.
	sys, err := load(t, &ebpf.ProgramSpec{Name: "pi_syscall", Type: ebpf.Syscall, Flags: unix.BPF_F_SLEEPABLE})
	if err != nil {
		t.Logf("kernel refuses a sleepable syscall program, sleepable=true not checked on the host: %v", err)
	} else {
		progs = append(progs, sys)
	}

	got := make(map[uint32]Record)
	if err := it.Read(got); err != nil {
		t.Fatal(err)
	}

	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		r, ok := got[p.id]
		if !ok {
			t.Errorf("%s (id %d) missing from %d records", p.name, p.id, len(got))
			continue
		}
		t.Logf("%s: %+v", p.name, r)
		if r.ID != p.id || r.Type != p.typ || r.ExpectedAttachType != uint32(p.spec.AttachType) {
			t.Errorf("%s: got id %d type %d expected_attach_type %d, want %d %d %d",
				p.name, r.ID, r.Type, r.ExpectedAttachType, p.id, p.typ, p.spec.AttachType)
		}
		if !r.SleepableKnown {
			t.Errorf("%s: sleepable flag unknown; this kernel has prog->sleepable or prog->aux->sleepable", p.name)
		}
		if want := p.spec.Flags&unix.BPF_F_SLEEPABLE != 0; r.Sleepable != want {
			t.Errorf("%s: sleepable %v, want %v", p.name, r.Sleepable, want)
		}
		if r.AttachFunc != p.spec.AttachTo {
			t.Errorf("%s: attach func %q, want %q", p.name, r.AttachFunc, p.spec.AttachTo)
		}
		if p.spec.AttachTo == "" {
			if r.AttachBTFID != 0 || r.AttachBTFObjID != 0 {
				t.Errorf("%s: untargeted program has attach btf %d in object %d", p.name, r.AttachBTFID, r.AttachBTFObjID)
			}
			continue
		}
		// The kernel resolves tp_btf targets to the btf_trace_<name> typedef.
		typ, err := kernel.AnyTypeByName("btf_trace_" + p.spec.AttachTo)
		if err != nil {
			t.Fatal(err)
		}
		want, err := kernel.TypeID(typ)
		if err != nil {
			t.Fatal(err)
		}
		if r.AttachBTFID != uint32(want) {
			t.Errorf("%s: attach btf id %d, want %d (btf_trace_%s in vmlinux)", p.name, r.AttachBTFID, want, p.spec.AttachTo)
		}
		if !r.AttachBTFObjKnown {
			if hasMember(t, kernel, "bpf_prog_aux", "attach_btf") {
				t.Errorf("%s: attach btf object not known, but the kernel's bpf_prog_aux has attach_btf", p.name)
			} else if r.AttachBTFObjID != 0 {
				t.Errorf("%s: attach btf object %d where the kernel keeps none", p.name, r.AttachBTFObjID)
			} else {
				t.Logf("%s: attach btf object not known: the kernel's bpf_prog_aux has no attach_btf", p.name)
			}
			continue
		}
		checkVmlinux(t, p.name, r.AttachBTFObjID)
	}

	self, ok := got[it.ProgramID()]
	if !ok {
		t.Fatalf("iterator's own program %d missing", it.ProgramID())
	}
	if self.Type != uint32(ebpf.Tracing) || self.ExpectedAttachType != uint32(ebpf.AttachTraceIter) {
		t.Errorf("iterator itself: type %d expected attach type %d, want tracing/trace_iter", self.Type, self.ExpectedAttachType)
	}
}

// hasMember says whether the kernel's struct typ (its BTF) has member.
func hasMember(t *testing.T, kernel *btf.Spec, typ, member string) bool {
	t.Helper()
	var st *btf.Struct
	if err := kernel.TypeByName(typ, &st); err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	for _, m := range st.Members {
		if m.Name == member {
			return true
		}
	}
	return false
}

func checkVmlinux(t *testing.T, name string, id uint32) {
	t.Helper()
	h, err := btf.NewHandleFromID(btf.ID(id))
	if err != nil {
		t.Errorf("%s: attach btf object %d: %v", name, id, err)
		return
	}
	defer h.Close()
	info, err := h.Info()
	if err != nil {
		t.Fatal(err)
	}
	if !info.IsVmlinux() {
		t.Errorf("%s: attach btf object %d is %q, want vmlinux", name, id, info.Name)
	}
}

// TestSleepableFentry tells fentry.s from fentry. Trampolines are refused on
// the CI host (EPERM); the kernel matrix runs this in VMs.
func TestSleepableFentry(t *testing.T) {
	it := loadIter(t)
	target := map[string]string{"amd64": "__x64_sys_getpgid", "arm64": "__arm64_sys_getpgid"}[runtime.GOARCH]
	if target == "" {
		t.Skipf("no syscall entry name known for %s", runtime.GOARCH)
	}
	fentry, err := load(t, &ebpf.ProgramSpec{Name: "pi_fentry", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: target})
	if err != nil {
		t.Skipf("kernel refuses fentry on %s: %v", target, err)
	}
	sleepable, err := load(t, &ebpf.ProgramSpec{Name: "pi_fentry_s", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: target, Flags: unix.BPF_F_SLEEPABLE})
	if err != nil {
		t.Skipf("kernel refuses fentry.s on %s: %v", target, err)
	}
	got := make(map[uint32]Record)
	if err := it.Read(got); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p    loaded
		want bool
	}{{fentry, false}, {sleepable, true}} {
		r := got[c.p.id]
		if !r.SleepableKnown || r.Sleepable != c.want || r.AttachFunc != target || r.ExpectedAttachType != uint32(ebpf.AttachTraceFEntry) {
			t.Errorf("%s: got %+v, want sleepable=%v known, fentry on %s", c.p.name, r, c.want, target)
		}
	}
}

// TestTargetProgram checks the target of a program that traces another
// BPF program: fentry on a socket filter with BTF, loaded and not attached,
// names it as DstProgID and its function as AttachFunc. Trampolines are
// refused on the CI host (EPERM); VMs run it.
func TestTargetProgram(t *testing.T) {
	it := loadIter(t)
	// The target needs BTF (func info) to be traceable; fentry on a
	// tracing program such as the iterator is refused as recursive.
	fn := &btf.Func{Name: "pi_target", Linkage: btf.GlobalFunc, Type: &btf.FuncProto{
		Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Params: []btf.FuncParam{{Name: "skb", Type: &btf.Pointer{Target: &btf.Struct{Name: "__sk_buff"}}}},
	}}
	insns := asm.Instructions{btf.WithFuncMetadata(asm.Mov.Imm(asm.R0, 0).WithSymbol("pi_target"), fn), asm.Return()}
	target, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "pi_target", Type: ebpf.SocketFilter, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("loading target program: %v", err)
	}
	defer target.Close()
	tinfo, err := target.Info()
	if err != nil {
		t.Fatal(err)
	}
	targetID, _ := tinfo.ID()

	spec := &ebpf.ProgramSpec{Name: "pi_fentry_bpf", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTarget: target, AttachTo: "pi_target"}
	l, err := load(t, spec)
	if err != nil {
		t.Skipf("kernel refuses fentry on a BPF program: %v", err)
	}
	got := make(map[uint32]Record)
	if err := it.Read(got); err != nil {
		t.Fatal(err)
	}
	r := got[l.id]
	t.Logf("%+v", r)
	// The target's BTF is the target program's own, so, as in
	// bpf_prog_info, no attach BTF object is named.
	if r.DstProgID != uint32(targetID) || r.AttachFunc != "pi_target" || r.AttachBTFID == 0 {
		t.Errorf("fentry on program %d (pi_target): got dst prog %d attach func %q btf id %d", targetID, r.DstProgID, r.AttachFunc, r.AttachBTFID)
	}
}

// TestReadReplaces checks that Read clears what the last pass left: a
// program unloaded between two reads is gone from the map.
func TestReadReplaces(t *testing.T) {
	it := loadIter(t)
	l := mustLoad(t, &ebpf.ProgramSpec{Name: "pi_gone", Type: ebpf.SocketFilter})
	got := make(map[uint32]Record)
	if err := it.Read(got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got[l.id]; !ok {
		t.Fatalf("program %d missing", l.id)
	}
	l.prog.Close()
	// The kernel frees a closed program after an RCU grace period.
	for i := 0; ; i++ {
		if err := it.Read(got); err != nil {
			t.Fatal(err)
		}
		if _, ok := got[l.id]; !ok {
			break
		}
		if i == 200 {
			t.Fatalf("program %d still reported after close", l.id)
		}
		runtime.Gosched()
		unix.Nanosleep(&unix.Timespec{Nsec: 5e6}, nil)
	}
}

// loadMany loads n socket filters so that a benchmark sees a node with
// n programs more than the host already has.
func loadMany(b *testing.B, n int) {
	spec := &ebpf.ProgramSpec{Name: "pi_bench", Type: ebpf.SocketFilter, Instructions: returnZero, License: "GPL"}
	for range n {
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			b.Fatalf("loading benchmark program: %v", err)
		}
		b.Cleanup(func() { p.Close() })
	}
}

// BenchmarkRead reads every program on the host plus 1,000 of its own;
// BenchmarkInfoWalk does the per-program syscall walk (GET_NEXT_ID,
// GET_FD_BY_ID, OBJ_GET_INFO_BY_FD, close) over the same set as the
// baseline the iterator replaces for these fields.
func BenchmarkRead(b *testing.B) {
	it := loadIter(b)
	loadMany(b, 1000)
	got := make(map[uint32]Record)
	if err := it.Read(got); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := it.Read(got); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(got)), "progs")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(got)), "ns/prog")
}

func BenchmarkInfoWalk(b *testing.B) {
	loadMany(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		n = 0
		for id := ebpf.ProgramID(0); ; {
			next, err := ebpf.ProgramGetNextID(id)
			if err != nil {
				break
			}
			id = next
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				continue // unloaded meanwhile
			}
			if _, err := p.Info(); err == nil {
				n++
			}
			p.Close()
		}
	}
	b.ReportMetric(float64(n), "progs")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/prog")
}

// TestLoadCached: a load from the CO-RE cache (probes/internal/coreload)
// reads what a load relocated from kernel BTF reads.
func TestLoadCached(t *testing.T) {
	dir := t.TempDir()
	l := mustLoad(t, &ebpf.ProgramSpec{Name: "pi_cached", Type: ebpf.SocketFilter})
	var recs [2]Record
	for i, wantCached := range []bool{false, true} {
		it, li, err := LoadCached(dir)
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("kernel refuses iter/bpf_prog: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		if li.Cached != wantCached || li.CacheErr != nil {
			t.Fatalf("load %d: cached %v (want %v), cache error %v", i, li.Cached, wantCached, li.CacheErr)
		}
		got := map[uint32]Record{}
		if err := it.Read(got); err != nil {
			t.Fatal(err)
		}
		recs[i] = got[l.id]
		if recs[i].ID != l.id {
			t.Fatalf("load %d: program %d missing", i, l.id)
		}
	}
	if recs[0] != recs[1] {
		t.Errorf("cached load read %+v, relocated %+v", recs[1], recs[0])
	}
}
