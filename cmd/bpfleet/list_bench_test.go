//go:build bench

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"
)

// This file is `make bench` only (build tag bench): a race against another
// tool's wall time says as much about the machine and its load as about
// bpfleet, so it is measured and printed, never a CI gate.

// timing is one run's wall and CPU (user+system) time.
type timing struct{ wall, cpu time.Duration }

func runTimed(t *testing.T, name string, args ...string) timing {
	t.Helper()
	cmd := exec.Command(name, args...)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return timing{time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// TestBenchListAgainstBpftool times `bpfleet list -o json` against
// `bpftool prog show -j` over 1,000 programs, alternated so all see the
// same machine load, and prints the medians and their ratios: with no agent
// running (list scans by syscall, or loads the iterator with --scan-source
// iterator) and with a real `bpfleet agent` running (list reads the
// iterator the agent pinned), each with and without owners; and the
// startup floor, `bpfleet version`.
//
// Debian's bpftool is built without its pid iterator: it reports no owners.
// The like-for-like comparison is therefore list --no-owners; the default
// (owners through a /proc walk, here of a process holding 1,000 program
// fds) is printed beside it.
//
// BPFLEET_BENCH_BASELINE names another CLI build of bpfleet (e.g. built
// from main: go build -tags lean), timed alternated with this one, so a
// change is a before/after pair from one run.
func TestBenchListAgainstBpftool(t *testing.T) {
	bin := bpfleetBin(t)
	bpftool, err := exec.LookPath("bpftool")
	if err != nil {
		t.Fatal("bpftool not found: run scripts/install-deps.sh")
	}
	ids := loadSocketFilters(t, 1000)
	dir := pinTestBPFFS(t) // the agent pins here, so no other agent's pin is used
	const runs = 21
	type variant struct {
		label string
		bin   string // "": bpftool prog show -j
		args  []string
		agent bool
	}
	noOwners := []string{"list", "-o", "json", "--no-owners", "--bpffs", dir}
	owners := []string{"list", "-o", "json", "--bpffs", dir}
	variants := []variant{
		{"bpftool prog show -j", "", nil, false},
		{"bpfleet version", bin, []string{"version"}, false},
		{"bpfleet-agent version (one full binary as before)", bin + "-agent", []string{"version"}, false},
		{"no agent:  list -o json --no-owners", bin, noOwners, false},
		{"no agent:  list -o json (owners)", bin, owners, false},
		{"no agent:  list ... --no-owners --scan-source iterator", bin, append(noOwners[:len(noOwners):len(noOwners)], "--scan-source", "iterator"), false},
		{"bpftool prog show -j (agent running)", "", nil, true},
		{"agent pin: list -o json --no-owners", bin, noOwners, true},
		{"agent pin: list -o json (owners)", bin, owners, true},
	}
	baseline := os.Getenv("BPFLEET_BENCH_BASELINE")
	if baseline != "" {
		variants = append(variants[:6:6], variant{"baseline: no agent: list -o json --no-owners", baseline, noOwners, false},
			variants[6], variants[7], variants[8],
			variant{"baseline: agent pin: list -o json --no-owners", baseline, noOwners, true},
			variant{"baseline: agent pin: list -o json (owners)", baseline, owners, true})
	}
	wall := make([][]time.Duration, len(variants))
	cpu := make([][]time.Duration, len(variants))
	measure := func(agent bool) {
		for i := 0; i < runs; i++ {
			for j, v := range variants {
				if v.agent != agent {
					continue
				}
				var tm timing
				if v.bin == "" {
					tm = runTimed(t, bpftool, "prog", "show", "-j")
				} else {
					tm = runTimed(t, v.bin, v.args...)
				}
				wall[j], cpu[j] = append(wall[j], tm.wall), append(cpu[j], tm.cpu)
			}
		}
	}
	measure(false)
	stop := startPinningAgent(t, bin, dir)
	if src := listJSONOwners(t, bin, "--bpffs", dir).Scan; src.IteratorPin == "" || src.OwnersPin == "" {
		t.Fatalf("list does not read the agent's pins: scan %+v", src)
	}
	if baseline != "" {
		if src := listJSONOwners(t, baseline, "--bpffs", dir).Scan; src.IteratorPin == "" || src.OwnersPin == "" {
			t.Logf("BENCH   (the baseline does not read this agent's pins, its iterator objects differ: scan %+v)", src)
		}
	}
	measure(true)
	stop()

	t.Logf("BENCH list-vs-bpftool: %d+ programs, median of %d alternated runs (wall, cpu; ratio = wall / bpftool wall of the same group)", len(ids), runs)
	base := median(wall[0])
	for j, v := range variants {
		w := median(wall[j])
		if v.agent && !variants[j-1].agent {
			base = w // the agent-running group starts with bpftool
		}
		t.Logf("BENCH   %-56s wall %8v  cpu %8v  = %.2fx", v.label, w, median(cpu[j]), float64(w)/float64(base))
	}
	t.Logf("BENCH   (no agent: no tracing program is loaded here; where one is, a list scanning by syscall also loads probes/progiter for its facts, ~25 ms more)")
}

// startPinningAgent runs `bpfleet agent` with its bpffs in dir and waits
// for its iterator pins; the returned func stops it.
func startPinningAgent(t *testing.T, bin, dir string) func() {
	t.Helper()
	cmd := exec.Command(bin, "agent", "--bpffs", dir, "--interval", "10s", "--calibrate=false", "--api-addr=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }
	t.Cleanup(stop)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, "bpfleet", "*")); len(m) >= 2 {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent pinned no iterator in 30 s")
		}
	}
}
