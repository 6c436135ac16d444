//go:build bench

package e2e

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/pods"
)

// TestBenchFleet is `make bench BENCH=fleet`: 50 nodes with 1,000 programs
// each and 100 pods (each with the 6 per-pod kinds of program real nodes
// attach: runc's device program, cgroup_skb/sock links, tc, tcx, XDP),
// reloaded and restarted 10 times, at the default (workload) level; then
// the program level on 5 nodes and 3 reloads for comparison (50 nodes of
// it would put millions of series in a Prometheus on this machine). The
// targets: head series within 5% of the first export's after 10 reloads,
// and at most 94.6 KB (a tenth of the program level's uncompressed 946 KB)
// per export per node.
func TestBenchFleet(t *testing.T) {
	w := runFleet(t, fleetConfig{agents: 50, programs: 1000, pods: 100, reloads: 10, level: exporter.LevelWorkload})
	w.report(t)
	first, last := w.rounds[0].headSeries, w.rounds[len(w.rounds)-1].headSeries
	t.Logf("BENCH target: head series within 5%% after 10 reloads: %.1f%% -> %v", 100*math.Abs(last-first)/first, math.Abs(last-first)/first <= 0.05)
	var bytes float64
	for _, r := range w.rounds {
		bytes += float64(r.bytes)
	}
	perExport := bytes / float64(len(w.rounds)) / 50
	t.Logf("BENCH target: bytes per export per node <= 94.6 KB: %.1f KB -> %v", perExport/1000, perExport <= 94600)

	p := runFleet(t, fleetConfig{agents: 5, programs: 1000, pods: 100, reloads: 3, level: exporter.LevelProgram})
	p.report(t)

	// Where workloads load the same program many times (per-endpoint or
	// per-container programs): 1,000 programs under 100 names.
	r := runFleet(t, fleetConfig{agents: 50, programs: 1000, names: 100, pods: 100, reloads: 3, level: exporter.LevelWorkload})
	r.report(t)
}

// TestBenchFleetCollector: the default level as fleets deploy it, through a
// real Collector (otlp receiver, batch, otlphttp) into Prometheus: the
// Collector's CPU and memory beside the exporters', series across reloads.
func TestBenchFleetCollector(t *testing.T) {
	c := runFleet(t, fleetConfig{agents: 50, programs: 1000, pods: 100, reloads: 5, level: exporter.LevelWorkload, collector: true})
	c.report(t)
	first, last := c.rounds[0].headSeries, c.rounds[len(c.rounds)-1].headSeries
	t.Logf("BENCH target through the Collector: head series within 5%% after 5 reloads: %.1f%% -> %v", 100*math.Abs(last-first)/first, math.Abs(last-first)/first <= 0.05)
}

// TestBenchAgentProcess: one real `bpfleet agent` (500 ms scans and
// exports) with 1,000 programs reloaded every 3 s into a real Prometheus,
// at the workload and the program level: its resident memory and CPU.
func TestBenchAgentProcess(t *testing.T) {
	prom := backends.StartPrometheus(t)
	for _, level := range []string{"workload", "program"} {
		progs, _ := loadFleetPrograms(t, 1000, 1000)
		a := startAgent(t, []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + prom.OTLPEndpoint(), "OTEL_TRACES_EXPORTER=none", "K8S_NODE_NAME=bench-" + level},
			"--metrics-level", level, "--calibrate=false")
		time.Sleep(3 * time.Second) // first scans and the owner walk
		_, cpu0 := procStat(t, a.cmd.Process.Pid)
		start := time.Now()
		maxRSS := 0
		for range 5 {
			for _, p := range progs {
				p.Close()
			}
			progs, _ = loadFleetPrograms(t, 1000, 1000)
			time.Sleep(3 * time.Second)
			rss, _ := procStat(t, a.cmd.Process.Pid)
			maxRSS = max(maxRSS, rss)
		}
		_, cpu1 := procStat(t, a.cmd.Process.Pid)
		a.stop(t)
		for _, p := range progs {
			p.Close()
		}
		ss, err := prom.Query(context.Background(), fmt.Sprintf(`count({instance="bench-%s"})`, level))
		series := 0.0
		if err == nil && len(ss) == 1 {
			series = ss[0].Value
		}
		t.Logf("BENCH agent process level=%s, 1,000 programs reloaded 5 times, 500 ms scans and exports: RSS max %.1f MB, CPU %.1f%% of one core; %.0f series of the node live in Prometheus",
			level, float64(maxRSS)/1000, 100*(cpu1-cpu0).Seconds()/time.Since(start).Seconds(), series)
	}
}

// TestBenchFleetPodChurn is TestPodChurnSeries at a node's scale: 300 pods
// (each with the 6 per-pod kinds of program, 1,800 programs), restarted 3
// times; the target: the series Prometheus ever saw within 5% of one
// generation's, per kind.
func TestBenchFleetPodChurn(t *testing.T) {
	const npods, rounds = 300, 3
	prom := backends.StartPrometheus(t)
	set := pods.New(t, npods, pods.Kinds...)
	api := startPodAPI(t, "podchurn-300")
	start := time.Now()
	gen0, ever := podChurn(t, prom, set, api, rounds, "podchurn-300")
	for _, k := range pods.Kinds {
		ratio := ever[k] / gen0[k]
		t.Logf("BENCH pod churn %-13s %d pods restarted %d times: %4.0f series in one generation, %4.0f ever (%.2fx) -> %v", k, npods, rounds, gen0[k], ever[k], ratio, ratio <= 1.05)
	}
	t.Logf("BENCH pod churn: %d rounds of %d pods in %.0f s (pods made and removed, scans, exports)", rounds+1, npods, time.Since(start).Seconds())
}
