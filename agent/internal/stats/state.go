package stats

import (
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
)

// StatsState says whether the kernel accrues run_time_ns / run_cnt, and why.
type StatsState struct {
	// Enabled is true while the kernel counts run time: the agent holds a
	// BPF_ENABLE_STATS fd or kernel.bpf_stats_enabled is 1.
	Enabled bool `json:"enabled"`
	// HeldByAgent is true when this agent holds a BPF_ENABLE_STATS fd.
	HeldByAgent bool `json:"held_by_agent"`
	// Sysctl is the value of kernel.bpf_stats_enabled; it counts every
	// holder, this agent included, so a value above what the agent holds
	// means someone else enabled stats too. -1 when unreadable.
	Sysctl int `json:"sysctl"`
	// Error says why the agent could not enable stats, if it could not.
	Error string `json:"error,omitempty"`
	// Mode is the agent's --stats mode: always, sampled or off; empty when
	// the agent leaves stats alone (one-shot list).
	Mode config.StatsMode `json:"mode"`
	// Window and Period are the sampled mode's: stats on for Window of
	// each Period; run counts and run time are scaled from the windows.
	Window time.Duration `json:"window_ns,omitempty"`
	Period time.Duration `json:"period_ns,omitempty"`
	// HeldElsewhere is true when the last look found stats on while this
	// agent held no fd (another tool's BPF_ENABLE_STATS fd, or the
	// sysctl): the tax is not this agent's, and in sampled mode the
	// intervals such a holder spans count exactly (Counts).
	HeldElsewhere bool `json:"held_elsewhere,omitempty"`
	// Counts says what the interval's run counts and run times are:
	// CountsExact (the kernel counted every run: stats on throughout, by
	// the agent's fd or another holder's) or CountsSampled (scaled from
	// the stats windows, in whole or in part). Empty when the agent does
	// not count runs (off mode, stats refused, one-shot list).
	Counts string `json:"counts,omitempty"`
}

// What an interval's run counts are (StatsState.Counts).
const (
	CountsExact   = "exact"
	CountsSampled = "sampled"
)
