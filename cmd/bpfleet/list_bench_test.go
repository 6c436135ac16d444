//go:build bench

package main

import (
	"os/exec"
	"sort"
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

// TestBenchListAgainstBpftool times `bpfleet list -o json` (with and without
// owners) against `bpftool prog show -j` over 1,000 programs, alternated so
// both see the same machine load, and prints the medians and their ratios.
//
// Debian's bpftool is built without its pid iterator: it reports no owners.
// The like-for-like comparison is therefore list --no-owners; the default
// (owners through the task_file iterator or a /proc walk, here of a process
// holding 1,000 program fds) is printed beside it.
func TestBenchListAgainstBpftool(t *testing.T) {
	bin := bpfleetBin(t)
	bpftool, err := exec.LookPath("bpftool")
	if err != nil {
		t.Fatal("bpftool not found: run scripts/install-deps.sh")
	}
	ids := loadSocketFilters(t, 1000)
	const runs = 21
	var oursWall, oursCPU, theirsWall, theirsCPU, ownersWall, ownersCPU, iterWall, iterCPU []time.Duration
	for i := 0; i < runs; i++ {
		o := runTimed(t, bin, "list", "-o", "json", "--no-owners")
		th := runTimed(t, bpftool, "prog", "show", "-j")
		w := runTimed(t, bin, "list", "-o", "json")
		it := runTimed(t, bin, "list", "-o", "json", "--no-owners", "--scan-source", "iterator")
		oursWall, oursCPU = append(oursWall, o.wall), append(oursCPU, o.cpu)
		theirsWall, theirsCPU = append(theirsWall, th.wall), append(theirsCPU, th.cpu)
		ownersWall, ownersCPU = append(ownersWall, w.wall), append(ownersCPU, w.cpu)
		iterWall, iterCPU = append(iterWall, it.wall), append(iterCPU, it.cpu)
	}
	ours, theirs, owners := median(oursWall), median(theirsWall), median(ownersWall)
	t.Logf("BENCH list-vs-bpftool: %d+ programs, median of %d alternated runs", len(ids), runs)
	t.Logf("BENCH   bpftool prog show -j             wall %8v  cpu %8v", theirs, median(theirsCPU))
	t.Logf("BENCH   bpfleet list -o json --no-owners wall %8v  cpu %8v  = %.2fx bpftool wall, %.2fx cpu",
		ours, median(oursCPU), float64(ours)/float64(theirs), float64(median(oursCPU))/float64(median(theirsCPU)))
	t.Logf("BENCH   bpfleet list -o json (owners)    wall %8v  cpu %8v  = %.2fx bpftool wall",
		owners, median(ownersCPU), float64(owners)/float64(theirs))
	iter := median(iterWall)
	t.Logf("BENCH   ... --no-owners --scan-source iterator wall %8v  cpu %8v  = %.2fx bpftool wall",
		iter, median(iterCPU), float64(iter)/float64(theirs))
}
