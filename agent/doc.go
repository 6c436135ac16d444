// Package agent reads every BPF program on the node and hands out one
// immutable Snapshot per scan. It owns the agent's configuration and
// lifecycle (New, Scan, Close: agent.go), the snapshot's assembly from
// two reads (assemble.go), miss episodes, the per-attach-type and
// per-owner sums, the owners' attribution and the iterator pins it
// publishes. Below it, in agent/internal, reader reads the programs and
// links (the scan source, the join, the eviction, one file per link
// kind's decoding), bpfsys talks to bpf(), prog holds the per-program
// types and stats controls run-time stats and their tax; their types are
// re-exported here, so consumers import agent alone.
package agent
