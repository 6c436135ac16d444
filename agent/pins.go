package agent

import (
	"errors"
	"io"
	"log/slog"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/probes/taskfile"
)

// PublishIterators pins iterator instances of the agent's own for one-shot
// `bpfleet list` runs on this node, in the first bpffs mount of --bpffs:
// the stats iterator (probes/progstats/pin.go) and, unless owners are off,
// the task_file one (probes/taskfile/pin.go). It returns what removes them
// at exit. None is pinned when the iterators are off by configuration
// (--no-iterator; --scan-source syscall: no stats iterator); one
// the kernel or bpffs refuses is logged, and list then scans by syscall
// (saying why in scan.fallback_reason) or walks /proc.
//
// Only a running agent pins (cmd/bpfleet's agent command calls this): a
// list that pinned for the next one would leave programs and maps in the
// kernel after it exits, with no owner to remove them.
func PublishIterators(c config.Scan, log *slog.Logger) io.Closer {
	var pins closers
	if c.NoIterator || len(c.BPFFS) == 0 {
		return pins
	}
	if c.ScanSource != "syscall" {
		cpus, err := progstats.PossibleCPUs()
		if err == nil {
			var p *progstats.Published
			if p, err = progstats.Publish(c.BPFFS[0], cpus); err == nil {
				log.Info("pinned the stats iterator for bpfleet list", "path", p.Path())
				pins = append(pins, p)
			}
		}
		if err != nil {
			log.Info("not pinning the stats iterator: bpfleet list will scan by syscall", "err", err)
		}
	}
	if !c.NoOwners {
		p, err := taskfile.Publish(c.BPFFS[0], c.CacheDir)
		if err != nil {
			log.Info("not pinning the task_file iterator: bpfleet list will walk /proc for owners", "err", err)
		} else {
			log.Info("pinned the task_file iterator for bpfleet list", "path", p.Path())
			pins = append(pins, p)
		}
	}
	return pins
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
