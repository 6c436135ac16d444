package statstable

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/bpfevents"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

func TestCapacity(t *testing.T) {
	for n, want := range map[int]int{0: 4096, 2048: 4096, 2049: 8192, 5000: 16384} {
		if got := Capacity(n); got != want {
			t.Errorf("Capacity(%d) = %d, want %d", n, got, want)
		}
	}
}

// FeatStatsTable is the feature name tests report.
const FeatStatsTable = "stats table"

// loadTable loads the table with a real watcher's events, skipping with the
// kernel's reason where it refuses (failing where the matrix entry has it).
func loadTable(tb testing.TB, capacity int) (*Table, int) {
	tb.Helper()
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	t, err := Load(cpus, capacity)
	took := time.Since(t0)
	if errors.Is(err, ebpf.ErrNotSupported) {
		expect.SkipUnlessExpected(tb, expect.FeatProgStats, fmt.Errorf("loading the stats table: %w", err))
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { t.Close() })
	tb.Logf("stats table variant %s over %d CPUs, loaded in %v (rdonly_cast refused: %q)", t.Variant(), cpus, took.Round(100*time.Microsecond), t.CastErr)
	return t, cpus
}

// TestSumsEqualObjInfo: for every program idle across the check, the
// table's run count, run time and recursion misses equal
// BPF_OBJ_GET_INFO_BY_FD's (the canary's genuine misses included), for
// both variants where the kernel has both.
func TestSumsEqualObjInfo(t *testing.T) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Logf("BPF_ENABLE_STATS refused (%v): run times may stay zero", err)
	} else {
		defer stats.Close()
	}
	tab, cpus := loadTable(t, MinCapacity)
	tables := []*Table{tab}
	if tab.Variant() == VariantCast {
		probe, err := load(cpus, MinCapacity, "sum_stats_probe")
		if err != nil {
			t.Fatalf("the probe_read variant is refused where rdonly_cast loads: %v", err)
		}
		probe.variant = VariantProbe
		defer probe.Close()
		tables = append(tables, probe)
	}
	c, canaryID := canarytest.Load(t)
	if err := c.Trigger(5); err != nil {
		t.Fatal(err)
	}
	sf, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "st_runs", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	for range 3 {
		if _, _, err := sf.Test(make([]byte, 14)); err != nil {
			t.Fatal(err)
		}
	}
	info, _ := sf.Info()
	sfID, _ := info.ID()

	it, err := progstats.Load(cpus)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	recs, err := it.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range tables {
		t.Run(tab.Variant(), func(t *testing.T) {
			slots := tab.Slots()
			for i, r := range recs {
				slots[i].Stats = r.StatsAddr
			}
			res, err := tab.Run(len(recs))
			if err != nil {
				t.Fatal(err)
			}
			if res.Bad != 0 {
				t.Logf("%d slots not summed", res.Bad)
			}
			first := append([]Slot(nil), slots[:len(recs)]...)
			refs := map[int]*ebpf.ProgramStats{}
			for i, r := range recs {
				p, err := ebpf.NewProgramFromID(ebpf.ProgramID(r.ID))
				if err != nil {
					continue // unloaded since
				}
				st, err := p.Stats()
				p.Close()
				if err != nil {
					t.Fatal(err)
				}
				refs[i] = st
			}
			if _, err := tab.Run(len(recs)); err != nil {
				t.Fatal(err)
			}
			compared, withMisses := map[uint32]bool{}, 0
			for i, r := range recs {
				s, s2, st := first[i], slots[i], refs[i]
				if st == nil || s != s2 {
					continue // gone or busy between the runs
				}
				if s.Flags&FlagSummed == 0 || int(s.CPUs) != cpus {
					t.Errorf("prog %d %s: not summed (flags %#x, %d CPUs)", r.ID, r.Name, s.Flags, s.CPUs)
					continue
				}
				if s.Cnt != st.RunCount || s.Nsecs != uint64(st.Runtime) || s.Misses != st.RecursionMisses {
					t.Errorf("prog %d %s: table runs %d time %d misses %d, obj info %d %d %d", r.ID, r.Name, s.Cnt, s.Nsecs, s.Misses, st.RunCount, uint64(st.Runtime), st.RecursionMisses)
				}
				if s.Misses > 0 {
					withMisses++
				}
				compared[r.ID] = true
			}
			t.Logf("%d programs compared, %d with misses", len(compared), withMisses)
			if !compared[canaryID] || !compared[uint32(sfID)] {
				t.Fatalf("the canary (%d) or st_runs (%d) was not compared", canaryID, sfID)
			}
			for i, r := range recs {
				if r.ID == canaryID && slots[i].Misses == 0 {
					t.Error("the canary has no misses after 5 triggers")
				}
				if r.ID == uint32(sfID) && slots[i].Cnt != 3 {
					t.Errorf("st_runs ran 3 times, table says %d", slots[i].Cnt)
				}
			}
		})
	}
}

// TestBadSlot: a slot with no stats address is marked, never summed.
func TestBadSlot(t *testing.T) {
	tab, _ := loadTable(t, MinCapacity)
	s := tab.Slots()
	s[0] = Slot{Stats: 0, Cnt: 99, Flags: FlagSummed}
	res, err := tab.Run(1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bad != 1 || s[0].Flags&FlagSummed != 0 {
		t.Errorf("a slot without an address: bad %d, flags %#x", res.Bad, s[0].Flags)
	}
	if _, err := tab.Run(tab.Cap() + 1); err == nil {
		t.Error("running past the capacity: no error")
	}
}

// BenchmarkRun is one table read of 1,000 programs, per variant the
// kernel loads.
func BenchmarkRun(b *testing.B) {
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		b.Fatal(err)
	}
	for range 1000 {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
	}
	it, err := progstats.Load(cpus)
	if err != nil {
		b.Fatal(err)
	}
	defer it.Close()
	recs, err := it.Read(nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, prog := range []string{"sum_stats_cast", "sum_stats_probe"} {
		b.Run(prog, func(b *testing.B) {
			tab, err := load(cpus, MinCapacity, prog)
			if err != nil {
				b.Skipf("refused: %v", err)
			}
			defer tab.Close()
			for i, r := range recs {
				tab.Slots()[i].Stats = r.StatsAddr
			}
			for b.Loop() {
				if _, err := tab.Run(len(recs)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/prog")
		})
	}
}

// cycleCPU takes the last possible CPU offline and brings it back: only
// in the kernel matrix's VMs (never the shared host's CPUs).
func cycleCPU(tb testing.TB, cpus int) {
	tb.Helper()
	if expect.Entry() == "" {
		tb.Skip("would take a CPU of this host offline: runs in the kernel matrix (test/kernels)")
	}
	if cpus < 2 {
		tb.Skipf("%d possible CPU: none can go offline", cpus)
	}
	path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpus-1)
	for _, v := range []string{"0", "1"} {
		if err := os.WriteFile(path, []byte(v), 0); err != nil {
			tb.Fatalf("writing %s to %s: %v", v, path, err)
		}
	}
}

// TestHotplugCounted: a CPU taken offline and brought back moves the
// hotplug counter.
func TestHotplugCounted(t *testing.T) {
	tab, cpus := loadTable(t, MinCapacity)
	if n := tab.Hotplugs(); n != 0 {
		t.Fatalf("%d hotplug steps counted with no CPU changed", n)
	}
	w, err := bpfevents.Open(cpus)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cycleCPU(t, cpus)
	if tab.Hotplugs() == 0 {
		t.Fatal("a CPU went offline and back: no hotplug step counted")
	}
	t.Logf("%d hotplug steps counted", tab.Hotplugs())
	// What the counter is for: the watcher opened before the cycle, on
	// the CPU that went offline and came back.
	runtime.LockOSThread() // never unlocked: the thread, pinned below, ends with the test
	var set unix.CPUSet
	set.Set(cpus - 1)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	w.Drain(nil)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	evs, lost := w.Drain(nil)
	t.Logf("load and unload on CPU %d after it went offline and back: %d records seen by a watcher opened before (lost %v)", cpus-1, len(evs), lost)
}
