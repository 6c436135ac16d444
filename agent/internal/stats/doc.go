// Package stats owns BPF run-time stats for the agent: holding the
// BPF_ENABLE_STATS fd as the mode says (always, sampled windows, off), the
// record of when the kernel counted (the agent's windows and other
// holders seen by a look), the sampled-mode estimates built from it, the
// kernel.bpf_stats_enabled read, and the stats tax: measuring its cost per
// run (the calibration, through probes/bench) and computing what it costs
// the node. The state and tax types are re-exported by the agent.
package stats
