package main

import (
	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/spf13/cobra"
)

// registerScanFlags binds the flags every command that scans the kernel
// shares to c (internal/config validates them).
func registerScanFlags(cmd *cobra.Command, c *config.Scan) {
	*c = config.DefaultScan()
	f := cmd.Flags()
	f.StringVar(&c.ProcRoot, "proc-root", c.ProcRoot, "where the host's procfs is mounted")
	f.StringSliceVar(&c.BPFFS, "bpffs", c.BPFFS, "bpffs mount points searched for pinned programs")
	f.BoolVar(&c.NoOwners, "no-owners", false, "skip owner attribution through /proc")
	f.BoolVar(&c.NoIterator, "no-iterator", false, "never load the bpf_prog iterators: scan by syscall (scan.fallback_reason says so) and tell fentry.s from fentry only where the kernel says")
	f.StringVar(&c.ScanSource, "scan-source", c.ScanSource, "where counters come from: iterator (one read of an iter/bpf_prog program, no program fd), syscall (per-program bpf() calls), or auto (the iterator where the kernel loads it; a one-shot list reads the one a running agent pinned, else scans by syscall, which loading an iterator would slow)")
	f.IntVar(&c.QuietIntervals, "quiet-intervals", c.QuietIntervals, "scans without new misses that close a miss episode")
	f.BoolVar(&c.NoMaps, "no-maps", false, "do not read the node's BPF maps (memory, entries, fullness)")
	f.IntVar(&c.MapCountBound, "map-count-bound", 0, "on kernels without bpf_map_sum_elem_count (before 6.6), count each hash map's elements by walking up to this many keys (one syscall per key; 0: entries absent there)")
}

// scanFlagsSet records which of the shared flags were given.
func scanFlagsSet(cmd *cobra.Command, c *config.Scan) {
	c.BPFFSSet = cmd.Flags().Changed("bpffs")
}

// agentConfig maps the validated shared flags to the agent's configuration.
func agentConfig(c config.Scan) agent.Config {
	return agent.Config{ProcRoot: c.ProcRoot, BPFFS: c.BPFFS, CacheDir: c.CacheDir, Owners: !c.NoOwners, NoIterator: c.NoIterator, ScanSource: c.ScanSource, QuietIntervals: c.QuietIntervals,
		Maps: !c.NoMaps, MapCountBound: c.MapCountBound}
}

// newAgent builds the agent from validated settings. Optional kernel
// helpers it cannot get (stats, iterators) are reported in the snapshots'
// Degraded lines, never fatal.
func newAgent(cfg agent.Config) (*agent.Agent, error) {
	raiseMemlock() // for the iterators and calibration probes it may load
	return agent.New(cfg)
}
