package catalog

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProbesCountTheirThread loads and attaches every catalog probe in both
// modes and checks that each one the kernel accepts counts exactly the calls
// its trigger made from this thread. Refusals are skipped with the kernel's
// reason, so they stay visible.
func TestProbesCountTheirThread(t *testing.T) {
	for _, m := range []Mode{Syscall, Kernel} {
		for _, typ := range All() {
			t.Run(string(m)+"/"+string(typ), func(t *testing.T) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tid := unix.Gettid()

				trig, err := NewTrigger(typ, m, 1000)
				if err != nil {
					t.Skipf("no trigger: %s", Reason(err))
				}
				defer trig.Close()
				p, err := Load(typ, m, tid)
				if err != nil {
					t.Skipf("kernel refused: %s", Reason(err))
				}
				defer p.Close()
				if err := p.Attach(); err != nil {
					t.Skipf("kernel refused: %s", Reason(err))
				}
				if id, err := p.ID(); err != nil || id == 0 {
					t.Errorf("probe id %d, %v", id, err)
				}
				for _, n := range []int{1000, 5000} {
					if err := p.ResetHits(); err != nil {
						t.Fatal(err)
					}
					calls, err := trig.Fire(n)
					if err != nil {
						t.Fatal(err)
					}
					hits, err := p.Hits()
					if err != nil {
						t.Fatal(err)
					}
					if hits != uint64(calls) {
						t.Errorf("%s on %s counted %d runs of this thread, want %d", typ, p.Target, hits, calls)
					}
				}
				// Detached, the probe must count nothing more.
				if err := p.Detach(); err != nil {
					t.Fatal(err)
				}
				p.ResetHits()
				trig.Fire(100)
				if hits, _ := p.Hits(); hits != 0 {
					t.Errorf("detached %s probe counted %d runs", typ, hits)
				}
			})
		}
	}
}

func TestProbeIgnoresOtherThreads(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := Load(RawTp, Syscall, unix.Gettid())
	if err != nil {
		t.Skipf("kernel refused raw_tp: %s", Reason(err))
	}
	defer p.Close()
	if err := p.Attach(); err != nil {
		t.Skipf("kernel refused raw_tp: %s", Reason(err))
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // a thread of its own, never the test's
		defer runtime.UnlockOSThread()
		_, err := SyscallTrigger{}.Fire(2000)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if hits, _ := p.Hits(); hits != 0 {
		t.Errorf("probe for thread %d counted %d runs of another thread", unix.Gettid(), hits)
	}
}

func TestParse(t *testing.T) {
	for _, typ := range All() {
		got, err := ParseAttachType(string(typ))
		if err != nil || got != typ {
			t.Errorf("ParseAttachType(%q) = %q, %v", typ, got, err)
		}
	}
	for _, bad := range []string{"", "fentry.x", "FENTRY"} {
		if _, err := ParseAttachType(bad); err == nil {
			t.Errorf("ParseAttachType(%q) accepted", bad)
		}
	}
	if _, err := ParseMode("kernel"); err != nil {
		t.Error(err)
	}
	if _, err := ParseMode("user"); err == nil {
		t.Error("ParseMode accepted user")
	}
}
