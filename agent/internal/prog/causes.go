package prog

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
	switch cause {
	case CauseRecursion:
		return c.Recursion
	case CauseInterrupt:
		return c.Interrupt
	case CausePreempted:
		return c.Preempted
	case CauseNested:
		return c.Nested
	case CauseUnexplained:
		return c.Unexplained
	}
	return 0
}

// Add adds n to one cause; a name not in Causes counts as unexplained.
func (c *MissCauses) Add(cause string, n uint64) {
	switch cause {
	case CauseRecursion:
		c.Recursion += n
	case CauseInterrupt:
		c.Interrupt += n
	case CausePreempted:
		c.Preempted += n
	case CauseNested:
		c.Nested += n
	default:
		c.Unexplained += n
	}
}

// Sum is every cause added up.
func (c *MissCauses) Sum() uint64 {
	return c.Recursion + c.Interrupt + c.Preempted + c.Nested + c.Unexplained
}

// Plus adds o to c.
func (c *MissCauses) Plus(o MissCauses) {
	c.Recursion += o.Recursion
	c.Interrupt += o.Interrupt
	c.Preempted += o.Preempted
	c.Nested += o.Nested
	c.Unexplained += o.Unexplained
}
