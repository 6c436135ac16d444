//go:build bench

package e2e

import (
	"math"
	"testing"

	"github.com/bpfleet/bpfleet/exporter"
)

// TestBenchFleet is `make bench BENCH=fleet`: 50 nodes with 1,000 programs
// each, reloaded 10 times, at the default (workload) level; then the
// program level on 5 nodes and 3 reloads for comparison (50 nodes of it
// would put millions of series in a Prometheus on this machine). The
// targets: head series within 5% of the first export's after 10 reloads,
// and at most 94.6 KB (a tenth of the program level's uncompressed 946 KB)
// per export per node.
func TestBenchFleet(t *testing.T) {
	w := runFleet(t, fleetConfig{agents: 50, programs: 1000, reloads: 10, level: exporter.LevelWorkload})
	w.report(t)
	first, last := w.rounds[0].headSeries, w.rounds[len(w.rounds)-1].headSeries
	t.Logf("BENCH target: head series within 5%% after 10 reloads: %.1f%% -> %v", 100*math.Abs(last-first)/first, math.Abs(last-first)/first <= 0.05)
	var bytes float64
	for _, r := range w.rounds {
		bytes += float64(r.bytes)
	}
	perExport := bytes / float64(len(w.rounds)) / 50
	t.Logf("BENCH target: bytes per export per node <= 94.6 KB: %.1f KB -> %v", perExport/1000, perExport <= 94600)

	p := runFleet(t, fleetConfig{agents: 5, programs: 1000, reloads: 3, level: exporter.LevelProgram})
	p.report(t)

	// Where workloads load the same program many times (per-endpoint or
	// per-container programs): 1,000 programs under 100 names.
	r := runFleet(t, fleetConfig{agents: 50, programs: 1000, names: 100, reloads: 3, level: exporter.LevelWorkload})
	r.report(t)
}
