package agent

import (
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/probes/taskfile"
)

// WarmOneShotCache writes into dir the CO-RE results that a one-shot list
// loads its iterators from (the stats and task_file iterators) where dir
// has none, without loading them. A list on a node where no agent ever ran
// finds the cache cold and reads by syscall and the /proc walk, since
// relocating an iterator from kernel BTF costs more than it saves in one
// scan; warming it after that list leaves every later one warm. The first
// error is returned: the next list then reads as this one did. It takes
// tens of ms of CPU (the kernel BTF parse): cmd/bpfleet runs it in a
// process of its own, not waited for.
func WarmOneShotCache(dir string) error {
	if err := progstats.WarmCache(dir); err != nil {
		return err
	}
	return taskfile.WarmCache(dir)
}

// OneShotCacheCold says whether dir lacks a CO-RE result a one-shot list
// would load (a stat and a read each; "" is never warm).
func OneShotCacheCold(dir string) bool {
	return !progstats.Cached(dir) || !taskfile.Cached(dir)
}
