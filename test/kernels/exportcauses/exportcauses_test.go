package exportcauses

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/guestagent"
)

const interval = 500 * time.Millisecond

func TestExportCauses(t *testing.T) {
	metrics, traces := os.Getenv(MetricsEnv), os.Getenv(TracesEnv)
	if metrics == "" || traces == "" {
		t.Skipf("%s and %s not set: exporter/e2e's TestGuestMissCauses runs this in a guest with backends to export to", MetricsEnv, TracesEnv)
	}
	c, err := canary.Load()
	if err != nil {
		expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
	}
	defer c.Close()
	id, err := c.ProgramID()
	if err != nil {
		t.Fatal(err)
	}
	instance := guestagent.Instance()
	ag := guestagent.Start(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + metrics,
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + traces,
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
		"OTEL_METRIC_EXPORT_INTERVAL=500", "OTEL_BSP_SCHEDULE_DELAY=200",
		"OTEL_RESOURCE_ATTRIBUTES=service.instance.id=" + instance,
	}, "--interval", interval.String(), "--metrics-level", "program", "--max-programs", "0", "--miss-watch", "--calibrate=false")

	// The first scan: the watcher says whether this kernel lets it watch.
	var ml api.MissList
	guestagent.Wait(t, 60*time.Second, "the agent's first scan", func() error {
		return guestagent.Get("/v1/misses", &ml)
	})
	if !ml.Watch.Available {
		expect.SkipUnlessExpected(t, expect.FeatMissWatch, fmt.Errorf("%s", ml.Watch.Reason))
	}
	// The watcher arms on a program's open miss episode: one miss opens
	// it (that miss counted unexplained), and the next scan watches it.
	if err := c.Trigger(1); err != nil {
		t.Fatal(err)
	}
	guestagent.Wait(t, 30*time.Second, fmt.Sprintf("the watcher watching canary %d", id), func() error {
		if err := guestagent.Get("/v1/misses", &ml); err != nil {
			return err
		}
		if !slices.ContainsFunc(ml.Watch.Watched, func(w agent.WatchedProgram) bool { return w.ProgID == id }) {
			return fmt.Errorf("watched %+v, waiting %v", ml.Watch.Watched, ml.Watch.Waiting)
		}
		return nil
	})
	before, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Trigger(Provoked); err != nil {
		t.Fatal(err)
	}
	total, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	if total-before != Provoked {
		t.Fatalf("kernel counted %d misses for %d triggers", total-before, Provoked)
	}
	// The agent's own view first: a wrong count here is the watcher's,
	// not the export's.
	var p agent.ProgramStat
	guestagent.Wait(t, 30*time.Second, "the agent's causes adding up to the kernel's misses", func() error {
		if err := guestagent.Get("/v1/programs/"+strconv.FormatUint(uint64(id), 10), &p); err != nil {
			return err
		}
		if p.MissCauses == nil || p.MissCauses.Sum() != total {
			return fmt.Errorf("causes %+v, kernel %d", p.MissCauses, total)
		}
		return nil
	})
	if p.MissCauses.Recursion != Provoked {
		t.Fatalf("agent explains %+v; want the %d watched misses as recursion", *p.MissCauses, Provoked)
	}
	// Two export intervals for the metrics; the shutdown flushes the
	// episode's span.
	time.Sleep(4 * interval)
	ag.Stop(t)
	var u unix.Utsname
	unix.Uname(&u)
	// What the host half checks the backends against.
	for k, v := range map[string]any{"program_id": id, "instance": instance,
		"os_version": unix.ByteSliceToString(u.Release[:]), "provoked": Provoked, "kernel_misses": total} {
		t.Logf("metric %s%s=%v", MetricPrefix, k, v)
	}
}
