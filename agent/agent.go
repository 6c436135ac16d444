package agent

import (
	"context"
	"time"
)

// Config is the agent's configuration. The zero value is usable: defaults
// are filled in by New.
type Config struct {
	// EnableStats turns run-time stats on with BPF_ENABLE_STATS for the
	// agent's lifetime (the fd is held, the sysctl is never written).
	EnableStats bool
	// QuietIntervals is how many consecutive scans without new misses close
	// a miss episode. Default 2.
	QuietIntervals int
	// Owners enables owner attribution through /proc.
	Owners bool
	// OwnerRefresh is how often owners are re-read from /proc even when no
	// new program appeared. Default 30s.
	OwnerRefresh time.Duration
	// ProcRoot is where procfs is mounted (a DaemonSet mounts the host's
	// /proc elsewhere). Default /proc.
	ProcRoot string
	// BPFFS lists bpffs mount points searched for pins. Default /sys/fs/bpf.
	BPFFS []string
	// Now is the clock; tests inject one. Default time.Now.
	Now func() time.Time
}

// Scanner is what the exporter, the API and the TUI need from the agent.
type Scanner interface {
	// Scan reads the kernel once and returns the snapshot of the interval
	// since the previous scan.
	Scan(ctx context.Context) (*Snapshot, error)
	// Close releases the stats fd and returns every miss episode still
	// open, ended with Reason "shutdown".
	Close() []Episode
}
