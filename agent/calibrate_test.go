package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/bpfleet/bpfleet/probes/features"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestCalibrationInSnapshot: the start-up calibration is bounded, reports
// every catalog attach type (supported or with the kernel's reason), the
// supported overheads reach the snapshot's attach-type panel, and it does
// not disturb other programs: a bystander's probe on the same hook
// (raw_tp on sys_enter, counting one other thread's getpgid calls) counts
// exactly that thread's calls while calibration triggers its own, and the
// bystander's getpgid answers stay right (fmod_ret modifies nothing). It
// logs what calibration costs: CPU, programs loaded, how long each lived,
// and checks none of its programs outlives it.
func TestCalibrationInSnapshot(t *testing.T) {
	a := newTestAgent(t)
	// The agent's own long-lived programs (stats table, event watcher, the
	// stats look) load here, not during the measured calibration.
	scan(t, a)
	if _, err := a.CalibrateStats(context.Background(), nil); err != nil {
		t.Fatal(err)
	}

	// Helper goroutines of the test on locked threads, each reporting its
	// own CPU over the measured window (marked by window), so that what is
	// left of the process's CPU is calibration's.
	window := make(chan struct{}) // closed when calibration starts
	stop := make(chan struct{})   // closed when it has ended
	type helperCPU struct {
		cpu          time.Duration
		calls, wrong int
	}
	threadCPU := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}

	// The bystander: another tool's counting program and its thread, which
	// calls getpgid from when the program is attached until calibration
	// ends.
	by := make(chan int)
	goBy := make(chan struct{})
	byDone := make(chan helperCPU)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		// Getpgrp is a getpgid(0) call: made before the program is
		// loaded, or a busy machine could run it after the attach and the
		// program count one call more than the loop below.
		want := unix.Getpgrp()
		by <- unix.Gettid()
		<-goBy
		var r helperCPU
		var from time.Duration
		for started := false; ; {
			select {
			case <-stop:
				r.cpu = threadCPU() - from
				byDone <- r
				return
			case <-window:
				if !started {
					started, from = true, threadCPU()
				}
			default:
			}
			if pg, err := unix.Getpgid(0); err != nil || pg != want {
				r.wrong++
			}
			r.calls++
			time.Sleep(100 * time.Microsecond)
		}
	}()
	probe, err := catalog.Load(catalog.RawTp, catalog.Syscall, <-by)
	if err != nil {
		close(goBy)
		close(stop)
		<-byDone
		t.Fatalf("loading the bystander raw_tp: %v", err)
	}
	defer probe.Close()

	// Which programs calibration loads, and for how long: every program id
	// above the highest before it, polled every 2 ms.
	first := maxProgID(t)
	type seen struct{ from, to time.Time }
	progs := map[uint32]*seen{}
	pollDone := make(chan helperCPU)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		<-window
		from := threadCPU()
		for {
			select {
			case <-stop:
				pollDone <- helperCPU{cpu: threadCPU() - from}
				return
			default:
			}
			now := time.Now()
			for id := first; ; {
				next, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, id)
				if err != nil || !ok {
					break
				}
				if s := progs[next]; s != nil {
					s.to = now
				} else {
					progs[next] = &seen{now, now}
				}
				id = next
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	if err := probe.Attach(); err != nil {
		t.Fatalf("attaching the bystander: %v", err)
	}
	bystander, _ := probe.ID()
	close(goBy)
	var before unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	close(window)
	start := time.Now()
	cal, err := a.Calibrate(context.Background(), 3*time.Second)
	wall := time.Since(start)
	close(stop)
	poll, br := <-pollDone, <-byDone
	var after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	if err != nil {
		t.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()) - time.Duration(before.Utime.Nano()+before.Stime.Nano()) - poll.cpu - br.cpu
	if err := probe.Detach(); err != nil {
		t.Fatal(err)
	}
	hits, err := probe.Hits()
	if err != nil {
		t.Fatal(err)
	}

	var longest, total time.Duration
	n := 0
	for id, s := range progs {
		if id == uint32(bystander) {
			continue
		}
		n++
		d := s.to.Sub(s.from)
		total += d
		longest = max(longest, d)
	}
	t.Logf("calibration: %v wall, %v of CPU (the test's poller's %v and bystander's %v taken off), %d programs loaded on the node meanwhile (seen by a 2 ms poll), each alive at most %v, %v in all", wall, cpu, poll.cpu, br.cpu, n, longest, total)
	t.Logf("bystander raw_tp on sys_enter: counted %d of its thread's %d getpgid calls during calibration, %d wrong answers", hits, br.calls, br.wrong)
	// The budget bounds the wall time, and calibration measures on one
	// thread at a time, so its CPU is bounded by its wall time.
	if wall > 3500*time.Millisecond {
		t.Errorf("calibration took %v, beyond its 3 s budget", wall)
	}
	if cpu > wall+200*time.Millisecond {
		t.Errorf("calibration used %v of CPU in %v: more than one CPU at a time", cpu, wall)
	}
	if hits != uint64(br.calls) || br.wrong != 0 {
		t.Errorf("the bystander counted %d of %d calls with %d wrong answers: calibration disturbed another program", hits, br.calls, br.wrong)
	}
	if len(cal) != len(catalog.All()) {
		t.Errorf("calibration has %d attach types, catalog %d", len(cal), len(catalog.All()))
	}
	for _, c := range cal {
		if c.Supported {
			if c.OverheadNs <= 0 {
				t.Errorf("%s: supported with overhead %v", c.AttachType, c.OverheadNs)
			}
		} else if c.Reason == "" {
			t.Errorf("%s: unsupported without a reason", c.AttachType)
		}
	}
	// Every attach type `bpfleet probe` finds supported on this host (its
	// syscall-mode answer, asked after calibration so it takes none of the
	// budget) is either calibrated or reported as not reached, which is
	// what the product promises on a busy machine.
	byType := map[string]Calibration{}
	for _, c := range cal {
		byType[c.AttachType] = c
	}
	var probed []string
	for _, at := range catalog.All() {
		if features.HaveAttachType(at, catalog.Syscall) == nil {
			probed = append(probed, string(at))
		}
	}
	measured, unreached, faults := checkCalibrated(byType, probed, 3*time.Second*3/4, wall)
	t.Logf("calibrated %d of the %d attach types bpfleet probe supports here %v; not reached in the budget: %v", len(measured), len(probed), probed, unreached)
	for _, f := range faults {
		t.Error(f)
	}
	s := scan(t, a)
	if len(s.Calibration) != len(cal) {
		t.Errorf("snapshot carries %d calibrations, want %d", len(s.Calibration), len(cal))
	}
	// Calibration's programs: the catalog's probes (on_*) and drivers
	// (drive_*), the tax's no-op programs (bpfleet_tax_*). Each is closed
	// before Calibrate returns, but the kernel frees a program after an
	// RCU grace period (longer on a busy machine): give it 5 s.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; s = scan(t, a) {
		left = left[:0]
		for _, p := range s.Programs {
			if p.ID > first && p.ID != uint32(bystander) &&
				(strings.HasPrefix(p.Name, "on_") || strings.HasPrefix(p.Name, "drive_") || strings.HasPrefix(p.Name, "bpfleet_tax_")) {
				left = append(left, fmt.Sprintf("%d (%s)", p.ID, p.Name))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("programs loaded during calibration still there 5 s after it: %v", left)
	}
}

// checkCalibrated holds a calibration to its promise for the attach types
// the kernel supports (probed, in the catalog's order, which calibration
// follows): each is measured, or, where the attach-type budget ran out
// (the machine was busy), reported with exactly the budget's reason. A type
// missing, unsupported with another reason, or unreached while the budget
// was not spent (wall, the whole call's time, under it) or before a type
// measured after it, is a fault.
func checkCalibrated(byType map[string]Calibration, probed []string, budget, wall time.Duration) (measured, unreached, faults []string) {
	spent := fmt.Sprintf("not measured: calibration budget %s spent", budget)
	for _, at := range probed {
		c, ok := byType[at]
		switch {
		case !ok:
			faults = append(faults, fmt.Sprintf("%s: supported here but missing from the calibration", at))
		case c.Supported && c.OverheadNs > 0:
			if len(unreached) > 0 {
				faults = append(faults, fmt.Sprintf("%s measured after %v were not reached: the budget stops calibration in the catalog's order", at, unreached))
			}
			measured = append(measured, at)
		case c.Supported:
			faults = append(faults, fmt.Sprintf("%s: supported with overhead %v", at, c.OverheadNs))
		case c.Reason != spent:
			faults = append(faults, fmt.Sprintf("%s: supported here but not calibrated: %q, want a measurement or %q", at, c.Reason, spent))
		case wall < budget:
			faults = append(faults, fmt.Sprintf("%s: %q after %v, under the budget", at, c.Reason, wall))
		default:
			unreached = append(unreached, at)
		}
	}
	if len(probed) == 0 {
		faults = append(faults, "no attach type supported here: nothing to calibrate is no pass")
	}
	return measured, unreached, faults
}

// TestCheckCalibrated: the promise's check passes a busy machine's report
// and fails each fault it guards.
func TestCheckCalibrated(t *testing.T) {
	const budget = 2250 * time.Millisecond
	spent := Calibration{Reason: "not measured: calibration budget 2.25s spent"}
	ok := Calibration{Supported: true, OverheadNs: 40}
	probed := []string{"raw_tp", "kprobe", "uprobe"}
	for _, c := range []struct {
		name   string
		got    map[string]Calibration
		wall   time.Duration
		faults int
	}{
		{"all measured", map[string]Calibration{"raw_tp": ok, "kprobe": ok, "uprobe": ok}, time.Second, 0},
		{"busy: uprobe not reached", map[string]Calibration{"raw_tp": ok, "kprobe": ok, "uprobe": spent}, 3 * time.Second, 0},
		{"uprobe missing", map[string]Calibration{"raw_tp": ok, "kprobe": ok}, time.Second, 1},
		{"wrong reason", map[string]Calibration{"raw_tp": ok, "kprobe": ok, "uprobe": {Reason: "not measured: attach failed"}}, 3 * time.Second, 1},
		{"budget claimed, not spent", map[string]Calibration{"raw_tp": ok, "kprobe": ok, "uprobe": spent}, time.Second, 1},
		{"unreached before a measured one", map[string]Calibration{"raw_tp": ok, "kprobe": spent, "uprobe": ok}, 3 * time.Second, 1},
		{"supported at 0 ns", map[string]Calibration{"raw_tp": ok, "kprobe": ok, "uprobe": {Supported: true}}, time.Second, 1},
	} {
		_, _, faults := checkCalibrated(c.got, probed, budget, c.wall)
		if len(faults) != c.faults {
			t.Errorf("%s: faults %q, want %d", c.name, faults, c.faults)
		}
	}
}

// maxProgID is the highest program id loaded now.
func maxProgID(t *testing.T) uint32 {
	t.Helper()
	var id uint32
	for {
		next, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, id)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return id
		}
		id = next
	}
}

// TestAgentScansItsOwnProbes: a catalog probe is an ordinary program to the
// scan, with the attach type and target it was attached with and at least
// the runs its trigger thread caused (the raw_tp sees every syscall).
func TestAgentScansItsOwnProbes(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a := newTestAgent(t)
	for _, typ := range []catalog.AttachType{"tracepoint", "raw_tp"} {
		p, err := catalog.Load(typ, catalog.Syscall, unix.Gettid())
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("%s refused: %v", typ, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Attach(); err != nil {
			t.Fatal(err)
		}
		id, err := p.ID()
		if err != nil {
			t.Fatal(err)
		}
		scan(t, a)
		const n = 500
		for i := 0; i < n; i++ {
			unix.Getpgid(0)
		}
		s := scan(t, a)
		hits, err := p.Hits()
		if err != nil {
			t.Fatal(err)
		}
		ps := findProg(s, uint32(id))
		if ps == nil {
			t.Fatalf("%s probe %d not in scan", typ, id)
		}
		if ps.AttachType != string(typ) || hits != n || ps.Delta.Runs < n {
			t.Errorf("%s probe: attach %q target %q hits %d, scan delta runs %d, want %d", typ, ps.AttachType, ps.AttachTarget, hits, ps.Delta.Runs, n)
		}
	}
}
