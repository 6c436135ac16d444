//go:build bench

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
)

// This file is `make bench` only (build tag bench): a race against another
// tool's wall time says as much about the machine and its load as about
// bpfleet, so it is measured and printed, never a CI gate.

// timing is one run's wall and CPU (user+system) time.
type timing struct{ wall, cpu time.Duration }

func runTimed(t *testing.T, name string, args ...string) timing {
	t.Helper()
	return runTimedEnv(t, nil, name, args...)
}

// runTimedEnv is runTimed with env added to the test's environment.
func runTimedEnv(t *testing.T, env []string, name string, args ...string) timing {
	t.Helper()
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
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
// `bpftool prog show -j` over 1,000 and 10,000 programs (BPFLEET_BENCH_LIST
// picks the sizes), alternated so all see the same machine load, and prints
// the medians and their ratios: with no agent running (list scans by
// syscall, or loads the iterator with --scan-source iterator) and with a
// real `bpfleet agent` running (list reads the iterator the agent pinned),
// each with and without owners; and the startup floor, `bpfleet version`.
//
// Debian's bpftool is built without its pid iterator: it reports no owners.
// The like-for-like comparison is therefore list --no-owners; with owners
// (here of a process holding every program's fd) and no agent, list finds
// them with a task_file iterator of its own when the CO-RE cache holds it
// (any agent run on the node with that cache wrote it) and by a /proc walk
// when the cache is cold: both are timed.
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
	sizes := []int{1000, 10000}
	if v := os.Getenv("BPFLEET_BENCH_LIST"); v != "" {
		sizes = sizes[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("BPFLEET_BENCH_LIST=%q: want program counts such as 1000,10000", v)
			}
			sizes = append(sizes, n)
		}
	}
	// A list with a cold CO-RE cache leaves it warm: each cold run gets an
	// empty directory of its own (coldCache marks the variants).
	coldCache := []string{config.CacheDirEnv + "=cold"}
	warmCache := []string{config.CacheDirEnv + "=" + t.TempDir()}
	stop := startPinningAgent(t, bin, pinTestBPFFS(t), warmCache...) // it writes the CO-RE cache
	stop()
	loaded := 0
	for _, n := range sizes {
		if n > loaded {
			loadSocketFilters(t, n-loaded)
			loaded = n
		}
		t.Run(strconv.Itoa(n), func(t *testing.T) { benchList(t, bin, bpftool, n, coldCache, warmCache) })
	}
}

// benchList is one size of TestBenchListAgainstBpftool.
func benchList(t *testing.T, bin, bpftool string, n int, coldCache, warmCache []string) {
	dir := pinTestBPFFS(t) // the agent pins here, so no other agent's pin is used
	const runs = 21
	type variant struct {
		label string
		bin   string // "": bpftool prog show -j
		args  []string
		agent bool
		env   []string
		// next: run in the cache the run before it (a cold one) left.
		next bool
	}
	noOwners := []string{"list", "-o", "json", "--no-owners", "--bpffs", dir}
	owners := []string{"list", "-o", "json", "--bpffs", dir}
	variants := []variant{
		{"bpftool prog show -j", "", nil, false, nil, false},
		{"bpfleet version", bin, []string{"version"}, false, nil, false},
		{"bpfleet-agent version (one full binary as before)", bin + "-agent", []string{"version"}, false, nil, false},
		{"no agent:  list -o json --no-owners", bin, noOwners, false, warmCache, false},
		{"no agent:  list -o json --no-owners (cold CO-RE cache)", bin, noOwners, false, coldCache, false},
		{"no agent:  list -o json (owners)", bin, owners, false, warmCache, false},
		{"no agent:  list -o json (owners, cold CO-RE cache)", bin, owners, false, coldCache, false},
		{"no agent:  the next list -o json (owners) in the cache it left", bin, owners, false, coldCache, true},
		{"bpftool prog show -j (agent running)", "", nil, true, nil, false},
		{"agent pin: list -o json --no-owners", bin, noOwners, true, nil, false},
		{"agent pin: list -o json (owners)", bin, owners, true, nil, false},
	}
	baseline := os.Getenv("BPFLEET_BENCH_BASELINE")
	if baseline != "" {
		variants = append(variants[:8:8], variant{"baseline: no agent: list -o json --no-owners", baseline, noOwners, false, warmCache, false},
			variant{"baseline: no agent: list -o json (owners)", baseline, owners, false, warmCache, false},
			variant{"baseline: no agent: list -o json (owners, cold CO-RE cache)", baseline, owners, false, coldCache, false},
			variants[8], variants[9], variants[10],
			variant{"baseline: agent pin: list -o json --no-owners", baseline, noOwners, true, nil, false},
			variant{"baseline: agent pin: list -o json (owners)", baseline, owners, true, nil, false})
	}
	// Each no-agent variant reads what its label says: the cold cache by
	// syscall and /proc, the warm one by iterators.
	// The next list after a cold one reads by iterators, once the cold
	// one's background write is done (a user's next list comes seconds
	// later; it is not timed here).
	var lastCold string
	env := func(v variant) []string {
		switch {
		case v.env == nil || v.env[0] != coldCache[0]:
			return v.env
		case !v.next:
			lastCold = t.TempDir()
		default:
			for deadline := time.Now().Add(30 * time.Second); agent.OneShotCacheCold(lastCold); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the cold list left %s cold 30 s after it ended", lastCold)
				}
			}
		}
		return []string{config.CacheDirEnv + "=" + lastCold}
	}
	for _, v := range variants {
		if v.env == nil || v.bin != bin {
			continue
		}
		src, osrc := "iterator", agent.OwnersSourceIterator
		if v.env[0] == coldCache[0] && !v.next {
			src, osrc = "syscall", agent.OwnersSourceProc
		}
		if slices.Contains(v.args, "--no-owners") {
			osrc = ""
		}
		if got := listJSONEnv(t, env(v), bin, v.args[3:]...).Scan; got.Source != src || got.OwnersSource != osrc {
			t.Fatalf("%s: scan %+v, want programs by %s, owners by %q", v.label, got, src, osrc)
		}
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
					tm = runTimedEnv(t, env(v), v.bin, v.args...)
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

	t.Logf("BENCH list-vs-bpftool: %d+ programs, median of %d alternated runs (wall, cpu; ratio = wall / bpftool wall of the same group)", n, runs)
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
func startPinningAgent(t *testing.T, bin, dir string, env ...string) func() {
	t.Helper()
	cmd := exec.Command(bin, "agent", "--bpffs", dir, "--interval", "10s", "--calibrate=false", "--api-addr=")
	cmd.Env = append(os.Environ(), env...)
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
