//go:build !lean

package main

import (
	"log/slog"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/progstats"
)

// publishIterator pins an iterator instance of the agent's own for
// one-shot `bpfleet list` runs on this node (probes/progstats/pin.go), in
// the first bpffs mount of --bpffs, and returns it for removal at exit; nil
// when the iterator is off by configuration or the kernel or bpffs refuse
// (list then scans by syscall and says why).
//
// Only the agent pins: a list that pinned for the next one would leave a
// program and its maps in the kernel after it exits, with no owner to
// remove them.
func publishIterator(c config.Scan, log *slog.Logger) *progstats.Published {
	if c.NoIterator || c.ScanSource == "syscall" || len(c.BPFFS) == 0 {
		return nil
	}
	cpus, err := progstats.PossibleCPUs()
	if err == nil {
		var p *progstats.Published
		if p, err = progstats.Publish(c.BPFFS[0], cpus); err == nil {
			log.Info("pinned the stats iterator for bpfleet list", "path", p.Path())
			return p
		}
	}
	log.Info("not pinning the stats iterator: bpfleet list will scan by syscall", "err", err)
	return nil
}
