package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// A program loaded while the agent runs that misses N times before the
// agent first sees it: Prometheus' increase() counts those N, at the
// program level (a new series per id) and the workload level (a new key).
// The agent sends the load time as the counters' start time and Prometheus
// (created-timestamp-zero-ingestion) writes a zero there; without it the
// series would start at N and increase() would say 0.
func TestReloadedProgramFirstMisses(t *testing.T) {
	prom := backends.StartPrometheus(t)
	env := []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + prom.OTLPEndpoint(), "OTEL_TRACES_EXPORTER=none"}
	// Scans 4s apart, exports every 500ms: the load and the misses below
	// fall between two scans, so the first value the agent sees holds them.
	startAgent(t, append(env, "K8S_NODE_NAME=churn-program"), "--metrics-level", "program", "--interval", "4s")
	startAgent(t, append(env, "K8S_NODE_NAME=churn-workload"), "--metrics-level", "workload", "--interval", "4s")
	ctx := context.Background()
	for _, node := range []string{"churn-program", "churn-workload"} {
		// Generous: on a busy machine an agent's start (stats-cost
		// measurement, first scans) can take a while.
		err := backends.Eventually(60*time.Second, func() error {
			ss, err := prom.Query(ctx, fmt.Sprintf(`bpf_agent_scans_total{instance=%q}`, node))
			if err != nil || len(ss) != 1 {
				return fmt.Errorf("agent %s not exporting yet: %v %v", node, ss, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Well after the agents started: the SDK's own start time (the
	// exporter's creation) would put the zero before loadedAfter.
	time.Sleep(3 * time.Second)
	loadedAfter := time.Now()
	c, id := canarytest.Load(t)
	const n = 50
	trigger(t, c, n)
	if m := kernelMisses(t, c); m != n {
		t.Fatalf("kernel counted %d misses for %d triggers", m, n)
	}
	for _, tc := range []struct{ node, sel string }{
		{"churn-program", fmt.Sprintf(`bpf_program_recursion_misses_total{instance="churn-program", bpf_program_id="%d"}`, id)},
		{"churn-workload", `bpf_program_recursion_misses_total{instance="churn-workload", bpf_program_name="canary"}`},
	} {
		err := backends.Eventually(30*time.Second, func() error {
			// The causes add up to the kernel's counter (the watcher may
			// have explained some of the canary's misses).
			ss, err := prom.Query(ctx, "sum without (bpf_miss_cause) ("+tc.sel+")")
			if err != nil || len(ss) != 1 || ss[0].Value != n {
				// More than n or more series: another canary of the same
				// key elsewhere on this shared machine is missing too.
				return fmt.Errorf("%s = %v, %v; want one series at %d", tc.sel, ss, err, n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The unexplained series is there from the program's first scan
		// (another cause's only once it counted): its start is the load time.
		rawSel := strings.TrimSuffix(tc.sel, "}") + `, bpf_miss_cause="unexplained"}`
		raw, err := prom.RawSamples(ctx, rawSel, 5*time.Minute)
		if err != nil || len(raw) != 1 {
			t.Fatalf("raw samples of %s: %v, %v", tc.sel, raw, err)
		}
		var last time.Time
		for _, pts := range raw {
			last = pts[len(pts)-1].Time
			// The kernel's load time, converted from boot time, may be a
			// little off the wall clock.
			early := loadedAfter.Add(-500 * time.Millisecond)
			if tc.node == "churn-workload" && pts[0].Time.Before(early) {
				// The machine is shared: another process of this test
				// binary's name had a canary loaded when the agent started,
				// so the key's series began then (counting from the
				// agent's start). Only increase() below is this test's.
				t.Logf("%s: the key existed before this test's canary (another %s canary on the machine); start time not checked", tc.node, "e2e.test")
				continue
			}
			zeros := 0
			for _, p := range pts {
				if p.Value == 0 {
					zeros++
					if p.Time.Before(early) {
						t.Errorf("%s: zero sample at %v, before the program loaded (after %v): the start time is not the load time", tc.node, p.Time, loadedAfter)
					}
				}
			}
			// One zero: the start-time sample. More: a scan fell between
			// the load and the misses, and this run did not test much.
			if zeros == 0 {
				t.Errorf("%s: no zero sample at the program's load time: %v", tc.node, pts)
			} else if zeros > 1 {
				t.Logf("%s: a scan saw the canary before its misses (%d zeros); increase() would count them anyway", tc.node, zeros)
			}
			t.Logf("%s: first samples %v", tc.node, pts[:min(3, len(pts))])
		}
		// At the last sample: no extrapolation past it, and none before the
		// zero at the start.
		q := fmt.Sprintf(`sum(increase(%s[1m] @ %.3f))`, tc.sel, float64(last.UnixMilli())/1000)
		ss, err := prom.Query(ctx, q)
		if err != nil || len(ss) != 1 {
			t.Fatalf("%s: %v, %v", q, ss, err)
		}
		if v := ss[0].Value; v != n {
			t.Errorf("%s = %v, want %d (the misses of the program's first interval)", q, v, n)
		} else {
			t.Logf("%s = %v", q, v)
		}
	}
}
