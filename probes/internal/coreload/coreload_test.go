package coreload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// TestApplyChecksPatches: cached patches apply only to exactly the
// program's CO-RE instructions.
func TestApplyChecksPatches(t *testing.T) {
	insns := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Mov.Imm(asm.R1, 0), asm.Return()}
	// One instruction carrying CO-RE metadata: index 1.
	insns[1] = btf.WithCORERelocationMetadata(insns[1], &btf.CORERelocation{})
	if btf.CORERelocationMetadata(&insns[1]) == nil {
		t.Skip("cannot attach CO-RE metadata outside a loaded object")
	}
	for _, tc := range []struct {
		name    string
		patches []Patch
		errPart string
	}{
		{"exact", []Patch{{Index: 1, OpCode: uint8(insns[1].OpCode), Dst: 1, Constant: 8}}, ""},
		{"none for one relocation", nil, "do not match"},
		{"wrong index", []Patch{{Index: 0}}, "do not match"},
		{"one too many", []Patch{{Index: 1}, {Index: 2}}, "2 for 1"},
	} {
		c := &Result{Patches: tc.patches}
		cp := make(asm.Instructions, len(insns))
		copy(cp, insns)
		err := c.Apply(cp)
		switch {
		case tc.errPart == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.errPart != "" && (err == nil || !strings.Contains(err.Error(), tc.errPart)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.errPart)
		case tc.errPart == "" && cp[1].Constant != 8:
			t.Errorf("%s: patch not applied: %v", tc.name, cp[1])
		}
	}
}

// TestCacheKey: a cache file is used only for its own key, and a damaged
// one is an error, not a result.
func TestCacheKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.json")
	c := &Result{Key: "k1", AttachBTFID: 7, Patches: []Patch{{Index: 3, Constant: -1}}, Enums: map[string]int64{"A": 8},
		Kfuncs: map[string]uint32{"kf": 99, "gone": 0}}
	if err := WriteCache(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCache(path, "k1")
	if err != nil || got.AttachBTFID != 7 || got.Patches[0] != c.Patches[0] || got.Enums["A"] != 8 ||
		got.Kfuncs["kf"] != 99 || len(got.Kfuncs) != 2 {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if _, err := ReadCache(path, "k2"); err == nil {
		t.Error("a cache for another kernel was used")
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCache(path, "k1"); err == nil {
		t.Error("a damaged cache was read")
	}
}

// TestScanEnums holds the raw BTF scan to cilium/ebpf's decoding of every
// type of the running kernel's BTF, for enumerators of anonymous and named
// enums, and one the kernel does not have.
func TestScanEnums(t *testing.T) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	names := []string{"TRACE_EVENT_FL_TRACEPOINT", "TRACE_EVENT_FL_KPROBE", "BPF_LINK_TYPE_TCX", "BPF_PROG_TYPE_TRACING", "NO_SUCH_ENUMERATOR_ANYWHERE"}
	want := map[string]int64{}
	for typ, err := range kernel.All() {
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := typ.(*btf.Enum); ok {
			for _, v := range e.Values {
				for _, n := range names {
					if _, dup := want[n]; v.Name == n && !dup {
						want[n] = int64(v.Value)
						if e.Signed {
							want[n] = int64(int32(v.Value))
						}
					}
				}
			}
		}
	}
	got := enumValues(names)
	if len(got) != len(want) || len(got) < 3 {
		t.Fatalf("raw scan %v, decoded %v", got, want)
	}
	for n, v := range want {
		if got[n] != v {
			t.Errorf("%s: raw scan %d, decoded %d", n, got[n], v)
		}
	}
}

// TestApplyKfuncs: a kfunc the kernel has is called by its BTF id and
// bpf_ksym_exists() reads that id; one it lacks is a poisoned helper call
// behind a constant 0; a map load is left alone and an unresolved kfunc
// call is an error, not a program the verifier refuses later.
func TestApplyKfuncs(t *testing.T) {
	prog := func() asm.Instructions {
		return asm.Instructions{
			asm.LoadImm(asm.R1, 0, asm.DWord).WithReference("kf"),
			asm.JEq.Imm(asm.R1, 0, "out"),
			{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoKfuncCall, Constant: -1},
			asm.LoadMapPtr(asm.R2, 0).WithReference("some_map"),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}
	}
	for _, tc := range []struct {
		name    string
		kfuncs  map[string]uint32
		wantErr bool
		wantLd  int64
		wantFn  int64
		kfunc   bool // the call is still a kfunc call
	}{
		{"present", map[string]uint32{"kf": 1234}, false, 1234, 1234, true},
		{"absent", map[string]uint32{"kf": 0}, false, 0, kfuncPoison, false},
		{"not resolved", nil, true, 0, 0, false},
	} {
		insns := prog()
		insns[2] = insns[2].WithReference("kf")
		err := (&Result{Kfuncs: tc.kfuncs}).Apply(insns)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if insns[0].Constant != tc.wantLd || insns[0].Src != 0 {
			t.Errorf("%s: bpf_ksym_exists load %v, want constant %d", tc.name, insns[0], tc.wantLd)
		}
		if insns[2].Constant != tc.wantFn || insns[2].IsKfuncCall() != tc.kfunc || insns[2].Offset != 0 {
			t.Errorf("%s: call %v, want constant %d (kfunc %v)", tc.name, insns[2], tc.wantFn, tc.kfunc)
		}
		if insns[3].Reference() != "some_map" || insns[3].Src != asm.PseudoMapFD {
			t.Errorf("%s: map load changed: %v", tc.name, insns[3])
		}
	}
}
