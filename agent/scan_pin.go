package agent

import (
	"strings"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/probes/taskfile"
)

// openPinnedStatsIter opens the stats iterator a running agent pinned in
// one of the bpffs mounts (probes/progstats/pin.go): a one-shot list reads
// it instead of loading an iterator of its own. It returns the iterator and
// its pin, or why there is none, in one line, for Scan.FallbackReason.
func openPinnedStatsIter(bpffs []string) (statsIter, string, string) {
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		return nil, "", err.Error()
	}
	var why []string
	for _, dir := range bpffs {
		it, err := progstats.OpenPinned(dir, cpus)
		if err == nil {
			return it, it.Path(), ""
		}
		why = append(why, err.Error())
	}
	return nil, "", strings.Join(why, "; ")
}

// openPinnedTaskfile opens the task_file iterator a running agent pinned
// (probes/taskfile/pin.go), so a one-shot list finds owners in one read
// rather than a /proc walk; nil when there is none.
func openPinnedTaskfile(bpffs []string) (owners.Source, string) {
	for _, dir := range bpffs {
		if it, err := taskfile.OpenPinned(dir); err == nil {
			return taskfileSource{it}, taskfile.PinPath(dir)
		}
	}
	return nil, ""
}
