package reader

import (
	"strings"

	"github.com/bpfleet/bpfleet/probes/progstats"
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
