package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
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

// timing is one run's wall and CPU (user+system) time.
type timing struct{ wall, cpu time.Duration }

func runTimed(t *testing.T, name string, args ...string) (timing, []byte) {
	t.Helper()
	cmd := exec.Command(name, args...)
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return timing{time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}, out
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// TestListJSONAgainstBpftool: over 1,000 programs `bpfleet list -o json`
// reports every one with the documented fields and owners, and its time is
// measured against `bpftool prog show -j` on the same machine, back to back.
func TestListJSONAgainstBpftool(t *testing.T) {
	bin := bpfleetBin(t)
	bpftool, err := exec.LookPath("bpftool")
	if err != nil {
		t.Fatal("bpftool not found: run scripts/install-deps.sh")
	}
	ids := loadSocketFilters(t, 1000)

	// Interleaved runs, so both tools see the same machine load. The
	// requirement is the time a user waits (wall); CPU time (user+system),
	// what each costs the node, is logged beside it.
	//
	// Debian's bpftool is built without its pid iterator: it reports no
	// owners. The like-for-like comparison is therefore list --no-owners;
	// the default (owners through a /proc walk, here of a process holding
	// 1,000 program fds) is measured and logged beside it.
	var out []byte
	var oursWall, oursCPU, theirsWall, theirsCPU, ownersWall []time.Duration
	for i := 0; i < 21; i++ {
		o, _ := runTimed(t, bin, "list", "-o", "json", "--no-owners")
		th, _ := runTimed(t, bpftool, "prog", "show", "-j")
		w, b := runTimed(t, bin, "list", "-o", "json")
		out = b
		oursWall, oursCPU = append(oursWall, o.wall), append(oursCPU, o.cpu)
		theirsWall, theirsCPU = append(theirsWall, th.wall), append(theirsCPU, th.cpu)
		ownersWall = append(ownersWall, w.wall)
	}
	ours, theirs, owners := median(oursWall), median(theirsWall), median(ownersWall)
	t.Logf("median of 21 over %d+ programs: bpfleet list -o json --no-owners wall %v cpu %v; bpftool prog show -j wall %v cpu %v; wall ratio %.2f, cpu ratio %.2f; with owners wall %v (%.2fx bpftool)",
		len(ids), ours, median(oursCPU), theirs, median(theirsCPU), float64(ours)/float64(theirs), float64(median(oursCPU))/float64(median(theirsCPU)), owners, float64(owners)/float64(theirs))
	// The requirement: list must take less time than bpftool. The Go
	// runtime and the init of everything the one binary links (OTel, gRPC,
	// client-go) cost ~6 ms before main against C's ~1 ms; the scan wins it
	// back (5 syscalls per program against bpftool's 9, spread over the
	// CPUs, no GC).
	if ours >= theirs {
		t.Errorf("bpfleet list -o json --no-owners took %v, bpftool prog show -j %v: not faster", ours, theirs)
	}
	// With owners list also walks every process's fds (a readlink each,
	// and a pidfd_getfd per BPF fd: here the test's 1,000), which this
	// bpftool does not do at all. Bound it so that it cannot regress.
	const maxOwners = 2.0
	if float64(owners) > maxOwners*float64(theirs) {
		t.Errorf("bpfleet list -o json took %v with owners, more than %.1fx bpftool's %v", owners, maxOwners, theirs)
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
