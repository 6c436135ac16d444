package reader

import (
	"time"

	"github.com/bpfleet/bpfleet/probes/linkstats"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// What benchmarks and tests of the agent's scan need of its reader: their
// baselines (every read walking), the kernel's part of a read timed apart,
// and a read by id stopped while it holds a program's fd.

// WhileOpen makes every later read of a program by id (the syscall
// source) call fn with its id while it holds the program's fd, between
// GET_FD_BY_ID and close: a test stops the read there to see what the
// agent's own process holds meanwhile. nil turns it off.
func (r *Reader) WhileOpen(fn func(id uint32)) { r.scratch.whileOpen = fn }

// WalkAlways turns the steady read off for good, saying why: every later
// read walks every program.
func (r *Reader) WalkAlways(why string) {
	r.steady.close()
	r.steady.tried, r.steady.off = true, why
}

// TimeIterators adds the time the iterators' reads take from now on (the
// kernel's part of a read, the map update before each included) to *d.
// It does nothing for a source that is not the iterator.
func (r *Reader) TimeIterators(d *time.Duration) {
	if r.iter != nil {
		r.iter = timedStats{r.iter, d}
	}
	if r.lsrc.iter != nil {
		r.lsrc.iter = timedLinks{r.lsrc.iter, d}
	}
}

// timedStats and timedLinks time the iterators' reads and the map update
// before each (the kernel's part of a scan) so that a benchmark can
// tell the Go side apart (TimeIterators).
type timedStats struct {
	statsIter
	d *time.Duration
}

func (t timedStats) SetKnownMaxID(id uint32) error {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.statsIter.SetKnownMaxID(id)
}

func (t timedStats) ReadStats(stats []progstats.Stat, whole []progstats.Record) ([]progstats.Stat, []progstats.Record, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.statsIter.ReadStats(stats, whole)
}

type timedLinks struct {
	linkIter
	d *time.Duration
}

func (t timedLinks) SetKnownMaxID(id uint32) error {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.linkIter.SetKnownMaxID(id)
}

func (t timedLinks) Read(dst []linkstats.Record) ([]linkstats.Record, error) {
	t0 := time.Now()
	defer func() { *t.d += time.Since(t0) }()
	return t.linkIter.Read(dst)
}
