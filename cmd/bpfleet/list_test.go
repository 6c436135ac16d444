package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

func loadSocketFilters(t *testing.T, n int) map[uint32]bool {
	t.Helper()
	spec := &ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "MIT", Name: "list_test",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()}}
	ids := map[uint32]bool{}
	for i := 0; i < n; i++ {
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			t.Fatalf("loading program %d: %v", i, err)
		}
		t.Cleanup(func() { p.Close() })
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids[uint32(id)] = true
	}
	return ids
}

// TestListJSONThousandPrograms: over 1,000 programs `bpfleet list -o json`
// reports every one with the documented fields and the test process as its
// owner. How long it takes against bpftool is a race against another tool's
// wall time, which depends on the machine and its load: that comparison is
// `make bench` (list_bench_test.go), never a CI assertion.
func TestListJSONThousandPrograms(t *testing.T) {
	bin := bpfleetBin(t)
	ids := loadSocketFilters(t, 1000)
	out, err := exec.Command(bin, "list", "-o", "json").Output()
	if err != nil {
		t.Fatalf("list -o json: %v", err)
	}
	var doc struct {
		Programs []map[string]any `json:"programs"`
		Attach   []map[string]any `json:"attach_types"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("list -o json is not JSON: %v", err)
	}
	seen, owned := 0, 0
	for _, p := range doc.Programs {
		for _, k := range []string{"id", "name", "type", "attach_type", "attach_target", "run_count", "run_time_ns", "recursion_misses", "owners"} {
			if _, ok := p[k]; !ok {
				t.Fatalf("program %v lacks %q", p["id"], k)
			}
		}
		if id, ok := p["id"].(float64); ok && ids[uint32(id)] {
			seen++
			if p["type"] != "socket_filter" || p["attach_type"] != "unattached" {
				t.Errorf("program %v: type %v attach %v", id, p["type"], p["attach_type"])
			}
			for _, o := range p["owners"].([]any) {
				if int(o.(map[string]any)["pid"].(float64)) == os.Getpid() {
					owned++
				}
			}
		}
	}
	if seen != len(ids) || owned != len(ids) {
		t.Errorf("list reported %d of the test's %d programs, %d with the test process as owner", seen, len(ids), owned)
	}
	if len(doc.Attach) == 0 {
		t.Error("no attach_types summary")
	}
}

// TestUnprivilegedOneLine: without the capabilities, list fails with one
// line that names them, not a stack trace.
func TestUnprivilegedOneLine(t *testing.T) {
	bin := bpfleetBin(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) not found")
	}
	out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin, "list").CombinedOutput()
	if err == nil {
		t.Fatalf("list as nobody succeeded:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "CAP_SYS_ADMIN") || !strings.Contains(lines[0], "CAP_BPF") || !strings.Contains(lines[0], "CAP_PERFMON") {
		t.Errorf("unprivileged list said:\n%s", out)
	}
}

// TestListProgramMemory: list -o json gives a program's own memory as its
// fdinfo memlock (which holds its translated instructions) and its JIT
// image, as the kernel reports them to the test.
func TestListProgramMemory(t *testing.T) {
	bin := bpfleetBin(t)
	set := bpfmaps.New(t, "list_mem", 1, 4)
	out, err := exec.Command(bin, "list", "-o", "json").Output()
	if err != nil {
		t.Fatalf("list -o json: %v", err)
	}
	var doc struct {
		Programs []struct {
			ID            uint32  `json:"id"`
			MemoryBytes   *uint64 `json:"memory_bytes"`
			VerifiedInsns *uint32 `json:"verified_insns"`
		} `json:"programs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("list -o json is not JSON: %v", err)
	}
	info, err := set.Prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	jited, err := info.JitedSize()
	if err != nil {
		t.Fatal(err)
	}
	xlated, err := info.TranslatedSize()
	if err != nil {
		t.Fatal(err)
	}
	insns, _ := info.VerifiedInstructions()
	want := uint64(jited) + bpfmaps.Memlock(t, set.Prog.FD())
	for _, p := range doc.Programs {
		if p.ID != set.ProgID {
			continue
		}
		if p.MemoryBytes == nil || *p.MemoryBytes != want {
			t.Errorf("program %d memory_bytes %v, want jited %d + memlock = %d (xlated %d is inside memlock)", p.ID, p.MemoryBytes, jited, want, xlated)
		}
		if p.VerifiedInsns == nil || *p.VerifiedInsns != insns {
			t.Errorf("program %d verified_insns %v, kernel says %d", p.ID, p.VerifiedInsns, insns)
		}
		return
	}
	t.Fatalf("program %d not listed", set.ProgID)
}
