package stats

import (
	"testing"
	"time"
)

// BenchmarkStatsLook is one look for another holder of stats (the no-op
// canary test-run between two reads of its run count): what sampled mode
// adds to every scan and does every second between windows.
func BenchmarkStatsLook(b *testing.B) {
	c := &Ctl{now: time.Now}
	defer c.Close()
	for b.Loop() {
		if _, err := c.statsOnLocked(); err != nil {
			b.Fatal(err)
		}
	}
}
