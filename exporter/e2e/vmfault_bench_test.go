//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// TestBenchVMFaults is `make bench BENCH=vmfaults`: the backend side of a
// fleet's faults, with one real agent exporting the canary's genuine
// misses (triggered all along: the truth is the kernel's counter) through
// the gateway Collector into Prometheus and the replicated two-node
// VictoriaMetrics.
//
//  1. Storage node 0 killed (SIGKILL) for BPFLEET_BENCH_OUTAGE (60s) and
//     started again: reads fail over to node 1 through vmauth, vmagent
//     keeps node 0's samples on disk and sends them when it is back. After,
//     both replicas hold the kernel's count, and the samples of the outage
//     (the agent's scan counter, one per export) on each are counted.
//  2. The gateway Collector stopped (SIGTERM, as a rollout does) for 10s
//     and started again: the agent's exports fail meanwhile, each one
//     counted in bpf.agent.export.errors; the counters are cumulative, so
//     the stores' counts equal the kernel's again after. The samples the
//     gap lost are set against the exports the agent counted as failed.
func TestBenchVMFaults(t *testing.T) {
	outage := 60 * time.Second
	if s := os.Getenv("BPFLEET_BENCH_OUTAGE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BPFLEET_BENCH_OUTAGE=%q: %v", s, err)
		}
		outage = d
	}
	c, id := canarytest.Load(t)
	prom := backends.StartPrometheus(t)
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
	col := backends.StartGateway(t, nil, prom.OTLPEndpoint(), vm.OTLPEndpoint())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("collector output:\n%s\nVictoriaMetrics output:\n%s", col.Log(), vm.Log())
		}
	})
	const node = "vm-faults"
	startAgent(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://" + col.OTLPHTTP + "/v1/metrics",
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=none",
		"K8S_NODE_NAME=" + node,
	}, "--metrics-level", "program")
	ctx := context.Background()
	stores := []store{{"Prometheus", prom}, {"VictoriaMetrics via vmauth", vm}}
	for i, n := range vm.Nodes {
		stores = append(stores, store{fmt.Sprintf("VictoriaMetrics node %d", i), n})
	}
	misses := fmt.Sprintf(`sum without (bpf_miss_cause) (bpf_program_recursion_misses_total{instance=%q, bpf_program_id="%d"})`, node, id)
	scans := fmt.Sprintf(`bpf_agent_scans_total{instance=%q}`, node)
	settle := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		want := float64(kernelMisses(t, c))
		for _, s := range stores {
			err := backends.Eventually(3*time.Minute, func() error {
				ss, err := s.q.Query(ctx, misses)
				if err != nil {
					return err
				}
				if len(ss) != 1 || ss[0].Value != want {
					return fmt.Errorf("%s after %s: %v, the kernel says %v", s.name, what, ss, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	// The canary misses 5 times every 500ms while the faults happen.
	triggering := func() (stop func()) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if err := c.Trigger(5); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
		return func() { close(done); wg.Wait() }
	}
	settle("the start")

	// 1. A storage node away.
	stop := triggering()
	from := time.Now().Add(-10 * time.Second)
	vm.Nodes[0].Kill()
	killed := time.Now()
	var reads, failed int
	for time.Since(killed) < outage {
		reads++
		if ss, err := vm.Query(ctx, misses); err != nil || len(ss) != 1 {
			failed++
		}
		time.Sleep(time.Second)
	}
	if err := vm.Nodes[0].Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	time.Sleep(5 * time.Second)
	stop()
	catchUp := settle("storage node 0's outage")
	window := time.Since(from) + 5*time.Second
	counts := make([]int, len(vm.Nodes))
	var gap0 time.Duration
	for i, n := range vm.Nodes {
		raw, err := n.RawSamples(ctx, scans, window)
		if err != nil || len(raw) != 1 {
			t.Fatalf("storage node %d: raw samples of %s: %v %v", i, scans, raw, err)
		}
		for _, pts := range raw {
			for j, p := range pts {
				if p.Time.Before(from) {
					continue
				}
				counts[i]++
				if i == 0 && j > 0 && p.Time.Sub(pts[j-1].Time) > gap0 {
					gap0 = p.Time.Sub(pts[j-1].Time)
				}
			}
		}
	}
	t.Logf("BENCH vmfaults: storage node 0 killed for %v: %d of %d reads through vmauth failed; both replicas at the kernel's count %v after node 0 was back (%v after the triggers stopped)",
		back.Sub(killed).Round(time.Second), failed, reads, (time.Since(back)).Round(time.Second), catchUp.Round(time.Millisecond))
	t.Logf("BENCH vmfaults: samples of %s since 10s before the kill: node 0 %d, node 1 %d (difference %d); node 0's longest gap between samples %v",
		scans, counts[0], counts[1], counts[1]-counts[0], gap0.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d reads through vmauth failed while one storage node was away", failed, reads)
	}

	// 2. The gateway restarted.
	exportErrors := func() float64 {
		t.Helper()
		ss, err := prom.Query(ctx, fmt.Sprintf(`sum(bpf_agent_export_errors_total{instance=%q, signal="metrics"}) or vector(0)`, node))
		if err != nil || len(ss) != 1 {
			t.Fatalf("export errors: %v %v", ss, err)
		}
		return ss[0].Value
	}
	errsBefore := exportErrors()
	stop = triggering()
	from = time.Now().Add(-10 * time.Second)
	col.Stop()
	stopped := time.Now()
	time.Sleep(10 * time.Second)
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	time.Sleep(5 * time.Second)
	stop()
	settle("the gateway's restart")
	// The agent's count of failed exports reaches the stores with its
	// next export that gets through.
	time.Sleep(2 * time.Second)
	errs := exportErrors() - errsBefore
	window = time.Since(from) + 5*time.Second
	for _, s := range []struct {
		name string
		api  interface {
			RawSamples(context.Context, string, time.Duration) (map[string][]backends.Point, error)
		}
	}{{"Prometheus", prom}, {"VictoriaMetrics node 0", vm.Nodes[0]}, {"VictoriaMetrics node 1", vm.Nodes[1]}} {
		raw, err := s.api.RawSamples(ctx, scans, window)
		if err != nil || len(raw) != 1 {
			t.Fatalf("%s: raw samples of %s: %v %v", s.name, scans, raw, err)
		}
		in, gap := 0, time.Duration(0)
		for _, pts := range raw {
			for j, p := range pts {
				if p.Time.Before(from) {
					continue
				}
				in++
				if j > 0 && p.Time.Sub(pts[j-1].Time) > gap {
					gap = p.Time.Sub(pts[j-1].Time)
				}
			}
		}
		t.Logf("BENCH vmfaults: gateway stopped for %v: %s has %d samples of %s since 10s before, longest gap %v (about %.0f exports' worth at %v); the agent counted %.0f failed metric exports",
			restarted.Sub(stopped).Round(100*time.Millisecond), s.name, in, scans, gap.Round(time.Millisecond), gap.Seconds()/interval.Seconds()-1, interval, errs)
	}
	if errs == 0 {
		t.Errorf("the gateway was down for %v and the agent counted no failed metric export", restarted.Sub(stopped).Round(time.Second))
	}
}
