package reader

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
)

// BenchmarkFirstScan compares a first read of 1,000 extra programs (every
// field, memlock included: what `bpfleet list` does) with bpftool's
// sequence of syscalls for the same (7 per program), in the same loop.
func BenchmarkFirstScan(b *testing.B) {
	scantest.LoadPrograms(b, 1000)
	for _, parallel := range []int{1, runtime.NumCPU()} {
		b.Run(fmt.Sprintf("parallel-%d", parallel), func(b *testing.B) {
			scantest.BenchAgainstFloor(b, true, func() int {
				r := newReader()
				r.parallel = parallel
				p, _, err := r.read(time.Now())
				if err != nil {
					b.Fatal(err)
				}
				r.fdinfo.Close()
				return len(p)
			})
		})
	}
}

// BenchmarkIterRead is the scan source alone (Reader.read: the iterator
// read, the join with links and cached static fields), without the
// snapshot Agent.Scan builds, against the 4-syscall floor: every read
// walks (the steady read off).
func BenchmarkIterRead(b *testing.B) { benchRead(b, false) }

// BenchmarkSteadyRead is BenchmarkIterRead with the steady read on: while
// nothing is loaded or unloaded, the watcher's two drains and one stats
// table run instead of the walk (walks/read says how many still walked).
func BenchmarkSteadyRead(b *testing.B) { benchRead(b, true) }

func benchRead(b *testing.B, steady bool) {
	scantest.LoadPrograms(b, 1000)
	a := New(Options{})
	defer a.Close()
	if a.iter == nil {
		b.Skipf("scan source is syscall on this kernel: %s", a.fallback)
	}
	if !steady {
		a.WalkAlways("off for this benchmark")
	}
	for range 2 {
		if _, _, err := a.read(time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	if steady && a.steady.w == nil {
		b.Skipf("no steady read on this kernel: %s", a.steady.off)
	}
	walks := 0
	scantest.BenchAgainstFloor(b, false, func() int {
		p, st, err := a.read(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if st.Walk {
			walks++
		}
		return len(p)
	})
	b.ReportMetric(float64(walks)/float64(b.N), "walks/read")
}
