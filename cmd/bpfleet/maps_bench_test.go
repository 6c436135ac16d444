//go:build bench

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/internal/config"
)

// TestBenchMapsAgainstBpftool times `bpfleet maps -o json` against
// `bpftool map show -j` over 30,000 maps (BPFLEET_BENCH_MAPS sets the
// count), alternated, medians of 11 runs: with the CO-RE cache holding the
// bpf_map iterator (what any agent run on the node leaves) and cold. The
// maps are pinned in bpffs, not held: 30,000 fds are more than a process
// may usually open. Half are hash maps with a few entries, half arrays.
// BPFLEET_BENCH_BASELINE names another CLI build timed beside this one.
func TestBenchMapsAgainstBpftool(t *testing.T) {
	bin := bpfleetBin(t)
	bpftool, err := exec.LookPath("bpftool")
	if err != nil {
		t.Fatal("bpftool not found: run scripts/install-deps.sh")
	}
	n := 30000
	if v := os.Getenv("BPFLEET_BENCH_MAPS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("BPFLEET_BENCH_MAPS=%q: want a map count", v)
		}
	}
	dir := pinTestBPFFS(t)
	start := time.Now()
	for i := range n {
		spec := &ebpf.MapSpec{Name: fmt.Sprintf("bench_m%d", i%100), Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 16}
		if i%2 == 1 {
			spec.Type = ebpf.Hash
		}
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatalf("creating map %d of %d: %v", i, n, err)
		}
		for k := range uint32(i % 16) {
			if err == nil && spec.Type == ebpf.Hash {
				err = m.Put(k, uint64(k))
			}
		}
		if err == nil {
			err = m.Pin(filepath.Join(dir, strconv.Itoa(i)))
		}
		m.Close()
		if err != nil {
			t.Fatalf("map %d: %v", i, err)
		}
	}
	t.Logf("BENCH maps-vs-bpftool: %d maps made and pinned in %v", n, time.Since(start).Round(time.Millisecond))

	coldCache := []string{config.CacheDirEnv + "=" + t.TempDir()}
	warmCache := []string{config.CacheDirEnv + "=" + t.TempDir()}
	agentDir := filepath.Join(dir, "agent")
	if err := os.Mkdir(agentDir, 0o700); err != nil {
		t.Fatal(err)
	}
	stop := startPinningAgent(t, bin, agentDir, warmCache...) // it writes the CO-RE cache
	stop()
	type variant struct {
		label, bin string
		env        []string
	}
	variants := []variant{
		{"bpftool map show -j", "", nil},
		{"bpfleet maps -o json", bin, warmCache},
		{"bpfleet maps -o json (cold CO-RE cache)", bin, coldCache},
	}
	if baseline := os.Getenv("BPFLEET_BENCH_BASELINE"); baseline != "" {
		variants = append(variants, variant{"baseline: bpfleet maps -o json", baseline, warmCache})
	}
	const runs = 11
	wall := make([][]time.Duration, len(variants))
	cpu := make([][]time.Duration, len(variants))
	for range runs {
		for j, v := range variants {
			var tm timing
			if v.bin == "" {
				tm = runTimed(t, bpftool, "map", "show", "-j")
			} else {
				tm = runTimedEnv(t, v.env, v.bin, "maps", "-o", "json")
			}
			wall[j], cpu[j] = append(wall[j], tm.wall), append(cpu[j], tm.cpu)
		}
	}
	t.Logf("BENCH maps-vs-bpftool: %d+ maps, median of %d alternated runs (wall, cpu; ratio = wall / bpftool wall)", n, runs)
	base := median(wall[0])
	for j, v := range variants {
		w := median(wall[j])
		t.Logf("BENCH   %-56s wall %8v  cpu %8v  = %.2fx", v.label, w, median(cpu[j]), float64(w)/float64(base))
	}
}
