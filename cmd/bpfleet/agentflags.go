package main

import (
	"fmt"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/spf13/cobra"
)

// agentFlags are the flags every command that scans the kernel shares.
type agentFlags struct {
	procRoot string
	bpffs    []string
	noOwners bool
	noIter   bool
	quiet    int
}

func (f *agentFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.procRoot, "proc-root", "/proc", "where the host's procfs is mounted")
	cmd.Flags().StringSliceVar(&f.bpffs, "bpffs", []string{"/sys/fs/bpf"}, "bpffs mount points searched for pinned programs")
	cmd.Flags().BoolVar(&f.noOwners, "no-owners", false, "skip owner attribution through /proc")
	cmd.Flags().BoolVar(&f.noIter, "no-iterator", false, "never load the bpf_prog iterator (it is loaded only when tracing/lsm programs exist, to tell fentry.s from fentry)")
	cmd.Flags().IntVar(&f.quiet, "quiet-intervals", 2, "scans without new misses that close a miss episode")
}

func (f *agentFlags) config() agent.Config {
	return agent.Config{ProcRoot: f.procRoot, BPFFS: f.bpffs, Owners: !f.noOwners, NoIterator: f.noIter, QuietIntervals: f.quiet}
}

// newAgent checks the shared flags and builds the agent. Optional kernel
// helpers it cannot get (stats, iterators) are reported in the snapshots'
// Degraded lines, never fatal.
func newAgent(cfg agent.Config) (*agent.Agent, error) {
	if cfg.QuietIntervals < 1 {
		return nil, fmt.Errorf("--quiet-intervals must be at least 1, got %d", cfg.QuietIntervals)
	}
	raiseMemlock() // for the iterators and calibration probes it may load
	return agent.New(cfg)
}
