package reader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// TestTransientClassification: the kernel's "came or went" answers are
// counted as vanished, retried once, and never as scan errors; every other
// error is one.
func TestTransientClassification(t *testing.T) {
	for _, tc := range []struct {
		err            error
		kept           bool
		vanished, errs int
	}{
		{nil, true, 0, 0},
		{fmt.Errorf("opening prog 7: %w", unix.ENOENT), false, 1, 0},
		{fmt.Errorf("opening link 5: %w", unix.EAGAIN), false, 1, 0},
		{fmt.Errorf("reading link 5 info: %w", unix.EAGAIN), false, 1, 0},
		{fmt.Errorf("opening prog 7: %w", unix.EPERM), false, 0, 1},
		{fmt.Errorf("reading prog 7 info: %w", unix.EINVAL), false, 0, 1},
		{fmt.Errorf("opening link 5: %w", unix.EMFILE), false, 0, 1},
		{errors.New("resource temporarily unavailable"), false, 0, 1}, // text alone is not the errno
	} {
		var st ScanStats
		r := newReader()
		if got := r.keep(&st, tc.err); got != tc.kept || st.Vanished != tc.vanished || st.Errors != tc.errs {
			t.Errorf("keep(%v) = %v, vanished %d, errors %d; want %v, %d, %d", tc.err, got, st.Vanished, st.Errors, tc.kept, tc.vanished, tc.errs)
		}
	}

	for _, tc := range []struct {
		answers []error
		calls   int
		wantErr error
	}{
		{[]error{nil}, 1, nil},
		{[]error{unix.EAGAIN, nil}, 2, nil},
		{[]error{unix.ENOENT, nil}, 2, nil},
		{[]error{unix.EAGAIN, unix.EAGAIN}, 2, unix.EAGAIN},
		{[]error{unix.EAGAIN, unix.ENOENT}, 2, unix.ENOENT},
		{[]error{unix.EPERM}, 1, unix.EPERM},
	} {
		calls := 0
		_, err := retryTransient(func() (int, error) {
			err := tc.answers[calls]
			calls++
			return 0, err
		})
		if calls != tc.calls || !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
			t.Errorf("answers %v: %d calls, err %v; want %d, %v", tc.answers, calls, err, tc.calls, tc.wantErr)
		}
	}
}

// TestLinksChurningUnderScan creates and closes raw tracepoint links in a
// tight loop while the reader reads: links caught mid-create or mid-teardown
// must show as vanished (or not at all), never as scan errors.
func TestLinksChurningUnderScan(t *testing.T) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.RawTracepoint,
		License:      "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
	if err != nil {
		t.Fatalf("loading a raw_tp program: %v", err)
	}
	defer prog.Close()
	a := New(Options{})
	defer a.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var churned atomic.Int64
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: prog})
				if err != nil {
					t.Errorf("attaching raw_tp link: %v", err)
					return
				}
				l.Close()
				churned.Add(1)
			}
		})
	}
	var vanished, scans int
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		_, st, err := a.ReadView(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		scans++
		vanished += st.Vanished
		if st.Errors > 0 {
			t.Errorf("scan %d: %d errors: %v", scans, st.Errors, st.ErrorMsgs)
			break
		}
	}
	cancel()
	wg.Wait()
	t.Logf("%d scans while %d links were created and closed: %d came or went", scans, churned.Load(), vanished)
}
