package reader

import (
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// The per-program types the reader fills are agent/internal/prog's.
type (
	Program     = prog.Program
	Link        = prog.Link
	Owner       = prog.Owner
	ProgramStat = prog.ProgramStat
)

// ScanStats is the agent's account of its own work in one scan.
type ScanStats struct {
	Duration time.Duration `json:"duration_ns"`
	Programs int           `json:"programs"`
	Links    int           `json:"links"`
	// Vanished counts objects that came or went under the scan: freed
	// between GET_NEXT_ID and GET_FD_BY_ID (ENOENT), or a link still being
	// created or torn down (EAGAIN, after one retry). A normal race, not an
	// error.
	Vanished int `json:"vanished"`
	// Errors counts objects that could not be read for another reason.
	Errors    int      `json:"errors"`
	ErrorMsgs []string `json:"error_messages,omitempty"`
	// OwnersRefreshed is true when this scan re-read /proc for owners.
	OwnersRefreshed bool `json:"owners_refreshed"`
	// Source is where programs and counters were read from: "iterator"
	// (one iter/bpf_prog read, no per-program syscall) or "syscall".
	Source string `json:"source"`
	// FallbackReason says why a node that could use the iterator does
	// not (kernel refusal, lockdown, --no-iterator); empty otherwise.
	FallbackReason string `json:"fallback_reason,omitempty"`
	// IteratorPin is the bpffs pin of a running agent's iterator that a
	// one-shot list read instead of loading its own; empty otherwise.
	IteratorPin string `json:"iterator_pin,omitempty"`
	// OwnersPin is the bpffs pin of a running agent's task_file iterator
	// that a one-shot list found owners with instead of walking /proc.
	OwnersPin string `json:"owners_pin,omitempty"`
	// OwnersSource is how a refresh found the processes holding BPF
	// fds: "iterator" (the task_file iterator, pinned or loaded) or
	// "proc" (a walk of /proc/PID/fd); empty when owners were not read.
	OwnersSource string `json:"owners_source,omitempty"`
	// LinksSource is where links (and kprobe link missed) were read
	// from: "iterator" (one iter/bpf_link read; a link it cannot read is
	// read by syscall) or "syscall".
	LinksSource string `json:"links_source"`
	// LinksFallbackReason says why links are read by syscall.
	LinksFallbackReason string `json:"links_fallback_reason,omitempty"`
	// Walk is true when this scan walked every program (an iterator pass
	// or the syscall path); false when, no program having been loaded or
	// unloaded since the last walk, the counters came from one stats
	// table read (scan_steady.go).
	Walk bool `json:"walk"`
	// WalkReason says why a scan walked: the first read, programs loaded
	// or unloaded, records lost, or why this node has no steady read.
	WalkReason string `json:"walk_reason,omitempty"`
}
