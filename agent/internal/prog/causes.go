package prog

import (
	"strconv"
	"strings"
)

// Miss causes: why the kernel turned a run of a program away, as the miss
// watcher (probes/misswatch) measured it from the kernel stack of the run
// it turned away. A closed set: series keyed by cause never multiply.
const (
	// CauseRecursion: the program's own code is on the stack of the run
	// turned away (it re-entered itself, directly, through a helper or
	// through another program). Fix the program.
	CauseRecursion = "recursion"
	// CauseInterrupt: a hardirq, softirq or NMI hit the CPU while the
	// interrupted context held the program's guard.
	CauseInterrupt = "interrupt"
	// CausePreempted: the holder of the program's per-CPU guard is not on
	// this CPU's stack: another task, preempted or asleep inside the
	// program (sleepable programs, PREEMPT_RT, full or lazy preemption).
	CausePreempted = "preempted"
	// CauseNested: a kprobe, tracepoint or perf program turned away because
	// something else (another program, a map operation from a syscall)
	// held the CPU's bpf_prog_active.
	CauseNested = "nested"
	// CauseUnexplained: counted by the kernel but not sampled: the program
	// was not watched (no slot, watcher absent, misses before the agent
	// started) or the watcher's budget was spent.
	CauseUnexplained = "unexplained"
)

// Causes lists every cause, in the order documents and tables show them.
var Causes = [...]string{CauseRecursion, CauseInterrupt, CausePreempted, CauseNested, CauseUnexplained}

// causeTable is the one table of the causes: each one's name, its initial
// in a table cell, and its count in a MissCauses. Every other list of the
// causes (Get, Add, Sum, Plus, Explained, FitCauses' order, the short
// form and its legend, list's JSON) is read from it.
var causeTable = [...]struct {
	name  string
	short byte
	count func(*MissCauses) *uint64
}{
	{CauseRecursion, 'r', func(c *MissCauses) *uint64 { return &c.Recursion }},
	{CauseInterrupt, 'i', func(c *MissCauses) *uint64 { return &c.Interrupt }},
	{CausePreempted, 'p', func(c *MissCauses) *uint64 { return &c.Preempted }},
	{CauseNested, 'n', func(c *MissCauses) *uint64 { return &c.Nested }},
	{CauseUnexplained, 0, func(c *MissCauses) *uint64 { return &c.Unexplained }},
}

// MissCauses counts misses by cause. A program's (ProgramStat.MissCauses)
// is cumulative and adds up to its recursion_misses exactly: the misses
// the agent did not sample (all of them before it started) are
// Unexplained.
type MissCauses struct {
	Recursion   uint64 `json:"recursion"`
	Interrupt   uint64 `json:"interrupt"`
	Preempted   uint64 `json:"preempted"`
	Nested      uint64 `json:"nested"`
	Unexplained uint64 `json:"unexplained"`
}

// Get returns the count of one cause (0 for a name not in Causes).
func (c *MissCauses) Get(cause string) uint64 {
	for _, k := range causeTable {
		if k.name == cause {
			return *k.count(c)
		}
	}
	return 0
}

// Add adds n to one cause; a name not in Causes counts as unexplained.
func (c *MissCauses) Add(cause string, n uint64) {
	for _, k := range causeTable {
		if k.name == cause {
			*k.count(c) += n
			return
		}
	}
	c.Unexplained += n
}

// Sum is every cause added up.
func (c *MissCauses) Sum() uint64 {
	var n uint64
	for _, k := range causeTable {
		n += *k.count(c)
	}
	return n
}

// Plus adds o to c.
func (c *MissCauses) Plus(o MissCauses) {
	for _, k := range causeTable {
		*k.count(c) += *k.count(&o)
	}
}

// Explained is the misses in c with a measured cause.
func (c *MissCauses) Explained() uint64 { return c.Sum() - c.Unexplained }

// Each calls fn with each cause's name and count, in Causes order.
func (c *MissCauses) Each(fn func(cause string, n uint64)) {
	for _, k := range causeTable {
		fn(k.name, *k.count(c))
	}
}

// FitExplained cuts c's explained causes, in Causes order, so that they
// add up to at most total (FitCauses sets the unexplained rest).
func (c *MissCauses) FitExplained(total uint64) {
	left := total
	for _, k := range causeTable {
		if k.short == 0 {
			continue
		}
		p := k.count(c)
		*p = min(*p, left)
		left -= *p
	}
}

// Short is c in a few characters for a table cell: the explained causes'
// initials and counts, "" where nothing was explained: "r10 p2".
func (c *MissCauses) Short() string {
	var b []byte
	for _, k := range causeTable {
		n := *k.count(c)
		if k.short == 0 || n == 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, k.short)
		b = strconv.AppendUint(b, n, 10)
	}
	return string(b)
}

// ShortLegend says what Short's initials stand for: "r recursion, i
// interrupt, p preempted, n nested".
func ShortLegend() string {
	var parts []string
	for _, k := range causeTable {
		if k.short != 0 {
			parts = append(parts, string(k.short)+" "+k.name)
		}
	}
	return strings.Join(parts, ", ")
}
