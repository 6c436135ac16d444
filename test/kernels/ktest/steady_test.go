package ktest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// TestSteadyScan: on this kernel the agent's scans read counters without
// walking every program while nothing is loaded or unloaded (the stats
// table; where the entry has the stats iterator, it must), a program
// loaded between scans appears with its runs, and one closed is gone from
// the next scan.
func TestSteadyScan(t *testing.T) {
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatalf("starting bpfleet's scanner: %v", err)
	}
	defer a.Close()
	ctx := context.Background()
	scanOnce := func() (map[uint32]agent.ProgramStat, agent.ScanStats) {
		snap, err := a.Scan(ctx)
		if err != nil {
			t.Fatalf("bpfleet scan: %v", err)
		}
		m := map[uint32]agent.ProgramStat{}
		for _, p := range snap.Programs {
			m[p.ID] = *p
		}
		return m, snap.Scan
	}
	settle := func() map[uint32]agent.ProgramStat {
		var st agent.ScanStats
		for range 40 {
			var progs map[uint32]agent.ProgramStat
			progs, st = scanOnce()
			if !st.Walk {
				return progs
			}
			time.Sleep(50 * time.Millisecond)
		}
		if expect.Expected(expect.FeatProgStats) {
			t.Fatalf("40 scans, every one walked; last reason: %s", st.WalkReason)
		}
		t.Skipf("no steady scan on this kernel: %s", st.WalkReason)
		return nil
	}
	settle()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	id := ProgramID(t, p)
	run := func(n int) {
		for range n {
			if _, _, err := p.Test(make([]byte, 14)); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(3)
	progs, st := scanOnce()
	if !st.Walk {
		t.Errorf("the scan after a load did not walk")
	}
	if progs[id].RunCount != 3 {
		t.Errorf("program %d: %d runs after 3 (present %v)", id, progs[id].RunCount, progs[id].ID == id)
	}
	settle()
	run(2)
	progs, st = scanOnce()
	if got := progs[id].RunCount; got != 5 {
		t.Errorf("program %d: %d runs after 5 (scan walked %v: %s)", id, got, st.Walk, st.WalkReason)
	}
	metric(t, "steady.walked_after_runs", boolInt(st.Walk))
	p.Close()
	progs, st = scanOnce()
	if _, ok := progs[id]; ok {
		t.Errorf("program %d closed before the scan is still listed (walk %v)", id, st.Walk)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSteadyScanHotplug: a CPU taken offline and brought back turns the
// steady scan off for good (the kernel turned that CPU's load/unload
// events off): every later scan walks and says why. Only in the kernel
// matrix's VMs.
func TestSteadyScanHotplug(t *testing.T) {
	if expect.Entry() == "" {
		t.Skip("would take a CPU of this host offline: runs in the kernel matrix (test/kernels)")
	}
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	steady := false
	for range 40 {
		snap, err := a.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if steady = !snap.Scan.Walk; steady {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !steady {
		t.Skip("no steady scan on this kernel (TestSteadyScan says why)")
	}
	path := "/sys/devices/system/cpu/cpu1/online"
	for _, v := range []string{"0", "1"} {
		if err := os.WriteFile(path, []byte(v), 0); err != nil {
			t.Skipf("writing %s to %s: %v", v, path, err)
		}
	}
	for i := range 3 {
		snap, err := a.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !snap.Scan.Walk {
			t.Fatalf("scan %d after a CPU went offline and back did not walk", i)
		}
		t.Logf("scan %d: walk_reason %q", i, snap.Scan.WalkReason)
	}
}
