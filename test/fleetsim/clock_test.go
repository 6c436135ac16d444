package fleetsim

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
)

// TestFleetClock: a fleet on a simulated clock an hour behind the wall
// (Config.Start), one gate feeding Prometheus and mirroring to
// VictoriaMetrics, stores every sample of every round at the round's
// time in both: the SDK instruments' (bpf_agent_scans_total) and the
// producers' (bpf_program_run_count_total), with pods restarting between
// scans. Nothing stamped with the wall clock, no export refused (a
// sample at a round's time with another round's value would be).
func TestFleetClock(t *testing.T) {
	ctx := context.Background()
	prom := backends.StartPrometheus(t)
	vm := backends.StartVictoriaMetrics(t, backends.VMConfig{Nodes: 2})
	start := time.Now().Add(-time.Hour + time.Minute).Truncate(time.Second)
	f, err := New(ctx, Config{Seed: 45, Start: start, PodChurn: 0.5,
		Endpoint: "http://" + prom.Addr + "/api/v1/otlp", Mirror: strings.TrimSuffix(vm.OTLPEndpoint(), "/v1/metrics"),
		Pools: []Pool{{Name: "web", Kernel: kernel618, Nodes: 3, Roles: []Role{RoleCNI}, Pods: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	for range 6 {
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tr := f.Truth()
	for _, n := range tr.Nodes {
		if n.ExportErrors > 0 {
			t.Fatalf("node %s: %d exports refused", n.Name, n.ExportErrors)
		}
	}
	want := map[int64]bool{}
	for _, rt := range tr.RoundTimes {
		want[rt.UnixMilli()] = true
	}
	for _, st := range []struct {
		name string
		api  interface {
			RawSamples(ctx context.Context, sel string, window time.Duration) (map[string][]backends.Point, error)
		}
	}{{"prometheus", prom}, {"victoriametrics", vm}} {
		for _, sel := range []string{`bpf_agent_scans_total{instance="web-0001"}`, `bpf_program_run_count_total{instance="web-0001"}`} {
			var got map[string][]backends.Point
			err := backends.Eventually(20*time.Second, func() error {
				var err error
				got, err = st.api.RawSamples(ctx, sel, 2*time.Hour)
				if err == nil && len(got) == 0 {
					err = errNoSeries
				}
				return err
			})
			if err != nil {
				t.Fatalf("%s: %s: %v", st.name, sel, err)
			}
			for series, pts := range got {
				seen := map[int64]bool{}
				for _, p := range pts {
					ms := p.Time.UnixMilli()
					switch {
					case want[ms]:
						seen[ms] = true
					case p.Value == 0 && !p.Time.Before(start) && !p.Time.After(tr.RoundTimes[len(tr.RoundTimes)-1]):
						// The zero Prometheus writes at a counter's start
						// (a program's load, between two scans).
					default:
						t.Errorf("%s: %s: a sample at %v (value %v), not at a round's time (rounds %v to %v)", st.name, series, p.Time.UTC(), p.Value,
							tr.RoundTimes[0].UTC(), tr.RoundTimes[len(tr.RoundTimes)-1].UTC())
					}
				}
				// A program of a pod restarted in the rounds has the
				// rounds since; one there from the boot has all.
				if strings.Contains(series, "bpf_agent_scans_total") && len(seen) != len(want) {
					t.Errorf("%s: %s: samples at %d of the %d rounds' times", st.name, series, len(seen), len(want))
				}
			}
		}
	}
}

var errNoSeries = errors.New("no series yet")
