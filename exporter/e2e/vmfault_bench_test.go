//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
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
//     (the agent's scan counter, one per export) on each are counted
//     against Prometheus', with the longest hole in each.
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
	// samples counts the samples of scans each store holds between from
	// and until, and the longest gap between two of them (from and until
	// count as samples: a hole at either end is a gap too), with where it
	// starts.
	type rawAPI interface {
		RawSamples(context.Context, string, time.Duration) (map[string][]backends.Point, error)
	}
	samples := func(name string, api rawAPI, from, until time.Time) (times map[int64]bool, gap time.Duration, gapAt time.Time) {
		t.Helper()
		raw, err := api.RawSamples(ctx, scans, time.Since(from)+5*time.Second)
		if err != nil || len(raw) != 1 {
			t.Fatalf("%s: raw samples of %s: %v %v", name, scans, raw, err)
		}
		times = map[int64]bool{}
		for _, pts := range raw {
			prev := from
			for _, p := range pts {
				if p.Time.Before(from) || p.Time.After(until) {
					continue
				}
				times[p.Time.UnixMilli()] = true
				if p.Time.Sub(prev) > gap {
					gap, gapAt = p.Time.Sub(prev), prev
				}
				prev = p.Time
			}
			if until.Sub(prev) > gap {
				gap, gapAt = until.Sub(prev), prev
			}
		}
		return times, gap, gapAt
	}
	type named struct {
		name string
		api  rawAPI
	}
	all := []named{{"Prometheus", prom}, {"VictoriaMetrics node 0", vm.Nodes[0]}, {"VictoriaMetrics node 1", vm.Nodes[1]}}
	// report logs what each store holds of the window, and which of
	// Prometheus' samples each storage node lacks (by time from the
	// fault at at); it returns how many each lacks from the fault on.
	report := func(fault string, at, from, until time.Time) (lacksAfter []int) {
		t.Helper()
		lacksAfter = make([]int, len(all))
		var ref map[int64]bool
		for i, st := range all {
			times, gap, gapAt := samples(st.name, st.api, from, until)
			line := fmt.Sprintf("BENCH vmfaults: %s: %s holds %d samples of %s from %v before the fault to the triggers' end; longest gap %v, from %v after the fault",
				fault, st.name, len(times), scans, at.Sub(from).Round(time.Second), gap.Round(time.Millisecond), gapAt.Sub(at).Round(100*time.Millisecond))
			if i == 0 {
				ref = times
			} else {
				var lacks []time.Duration
				for ms := range ref {
					if !times[ms] {
						lacks = append(lacks, time.UnixMilli(ms).Sub(at))
					}
				}
				slices.Sort(lacks)
				for _, d := range lacks {
					if d >= 0 {
						lacksAfter[i]++
					}
				}
				if len(lacks) > 0 {
					line += fmt.Sprintf("; lacks %d of Prometheus' samples, from %v to %v after the fault", len(lacks), lacks[0].Round(100*time.Millisecond), lacks[len(lacks)-1].Round(100*time.Millisecond))
				} else {
					line += "; lacks none of Prometheus' samples"
				}
			}
			t.Log(line)
		}
		return lacksAfter
	}

	// 1. A storage node away, after 30s of steady exports into every
	// store: the window counted starts there.
	stop := triggering()
	time.Sleep(30 * time.Second)
	from := time.Now().Add(-30 * time.Second)
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
	// The window ends where the triggers stopped, and is counted 10s
	// later at least: a sample still on its way through vmagent (a busy
	// machine delays it by seconds) is not taken for a lost one.
	until := time.Now()
	catchUp := settle("storage node 0's outage")
	time.Sleep(time.Until(until.Add(10 * time.Second)))
	t.Logf("BENCH vmfaults: storage node 0 killed for %v: %d of %d reads through vmauth failed; both replicas at the kernel's count %v after node 0 was back (%v after the triggers stopped)",
		back.Sub(killed).Round(time.Second), failed, reads, (time.Since(back)).Round(time.Second), catchUp.Round(time.Millisecond))
	// What node 0 had taken and not yet flushed when it was killed is
	// lost there (node 1 and Prometheus have it): vmagent counted it
	// delivered. From the kill on, vmagent's queue must leave no hole.
	for i, n := range report("storage node 0 killed", killed, from, until) {
		if n > 0 {
			t.Errorf("%s lacks %d of Prometheus' samples from the kill on: vmagent's queue lost them", all[i].name, n)
		}
	}
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
	until = time.Now()
	settle("the gateway's restart")
	// The agent's count of failed exports reaches the stores with its
	// next export that gets through.
	time.Sleep(time.Until(until.Add(10 * time.Second)))
	errs := exportErrors() - errsBefore
	t.Logf("BENCH vmfaults: gateway stopped for %v; the agent counted %.0f failed metric exports (one every %v)", restarted.Sub(stopped).Round(100*time.Millisecond), errs, interval)
	report("gateway stopped", stopped, from, until)
	if errs == 0 {
		t.Errorf("the gateway was down for %v and the agent counted no failed metric export", restarted.Sub(stopped).Round(time.Second))
	}
}
