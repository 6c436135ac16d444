package agent

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestCalibrationInSnapshot: the start-up calibration is bounded, reports
// every catalog attach type (supported or with the kernel's reason), and
// the supported overheads reach the snapshot's attach-type panel.
func TestCalibrationInSnapshot(t *testing.T) {
	a := newTestAgent(t)
	var before unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	cal, err := a.Calibrate(context.Background(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()) - time.Duration(before.Utime.Nano()+before.Stime.Nano())
	t.Logf("calibration used %v of CPU", cpu)
	if cpu > time.Second {
		t.Errorf("calibration used %v of CPU, budget is well under a second", cpu)
	}
	if len(cal) != len(catalog.All()) {
		t.Errorf("calibration has %d attach types, catalog %d", len(cal), len(catalog.All()))
	}
	supported := 0
	for _, c := range cal {
		if c.Supported {
			supported++
			if c.OverheadNs <= 0 {
				t.Errorf("%s: supported with overhead %v", c.AttachType, c.OverheadNs)
			}
		} else if c.Reason == "" {
			t.Errorf("%s: unsupported without a reason", c.AttachType)
		}
	}
	if supported == 0 {
		t.Fatal("no attach type calibrated")
	}
	s := scan(t, a)
	if len(s.Calibration) != len(cal) {
		t.Errorf("snapshot carries %d calibrations, want %d", len(s.Calibration), len(cal))
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
