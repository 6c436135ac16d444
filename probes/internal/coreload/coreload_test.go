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
	c := &Result{Key: "k1", AttachBTFID: 7, Patches: []Patch{{Index: 3, Constant: -1}}, Enums: map[string]int64{"A": 8}}
	if err := WriteCache(path, c); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCache(path, "k1")
	if err != nil || got.AttachBTFID != 7 || got.Patches[0] != c.Patches[0] || got.Enums["A"] != 8 {
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
