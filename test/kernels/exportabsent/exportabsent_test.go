package exportabsent

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/guestagent"
)

const interval = 500 * time.Millisecond

func TestExportAbsent(t *testing.T) {
	metrics := os.Getenv(MetricsEnv)
	if metrics == "" {
		t.Skipf("%s not set: exporter/e2e's TestGuestAbsentFigures runs this in a guest with a Prometheus to export to", MetricsEnv)
	}
	if err := canary.RecursionGuard(); err == nil {
		t.Skip("this kernel counts recursion misses: the test is for one that does not (bullseye-amd64)")
	}
	load := func(name string, typ ebpf.ProgramType) *ebpf.Program {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: typ, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			t.Fatalf("loading %s: %v", name, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	// A tracepoint that runs (getppid below) and a kprobe, attached as
	// this kernel allows (with PERF_EVENT_IOC_SET_BPF on 5.10: no link).
	tp := load("absent_tp", ebpf.TracePoint)
	tpl, err := link.Tracepoint("syscalls", "sys_enter_getppid", tp, nil)
	if err != nil {
		t.Fatalf("attaching the tracepoint: %v", err)
	}
	defer tpl.Close()
	kp := load("absent_kprobe", ebpf.Kprobe)
	kpl, err := link.Kprobe("htab_map_update_elem", kp, nil)
	if err != nil {
		t.Fatalf("attaching the kprobe: %v", err)
	}
	defer kpl.Close()
	ids := map[string]ebpf.ProgramID{}
	for name, p := range map[string]*ebpf.Program{"tracepoint_id": tp, "kprobe_id": kp} {
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids[name], _ = info.ID()
	}

	instance := guestagent.Instance()
	// Stats always on, so the tracepoint's runs are counted; the default
	// metrics level (workload), as the chart runs it.
	ag := guestagent.Start(t, []string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + metrics,
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=none",
		"OTEL_METRIC_EXPORT_INTERVAL=500",
		"OTEL_RESOURCE_ATTRIBUTES=service.instance.id=" + instance,
	}, "--interval", interval.String(), "--stats", "always", "--calibrate=false")

	// Runs for the tracepoint, then a snapshot that shows both programs.
	base := "http://" + guestagent.APIAddr
	var snap *agent.Snapshot
	guestagent.Wait(t, 60*time.Second, "the agent's snapshot listing the programs", func() error {
		unix.Getppid()
		var err error
		if snap, err = api.FetchSnapshot(context.Background(), base, ""); err != nil {
			return err
		}
		return listed(snap, ids)
	})
	if !slices.ContainsFunc(snap.Degraded, func(d string) bool { return strings.HasPrefix(d, agent.FeatureMisses+": ") }) {
		t.Errorf("the snapshot's Degraded lines do not say this kernel counts no recursion misses: %q", snap.Degraded)
	}
	for _, p := range snap.Programs {
		if p.RecursionMisses != nil || p.MissCauses != nil {
			t.Errorf("program %d (%s): recursion misses %v, causes %v; want both absent", p.ID, p.Name, p.RecursionMisses, p.MissCauses)
		}
	}
	// Their sums too: null, not a 0 summed from nothing.
	types, owners := len(snap.AttachTypes), len(snap.Owners)
	for _, a := range snap.AttachTypes {
		if a.RecursionMisses != nil {
			t.Errorf("attach type %s: recursion misses %d; want absent", a.AttachType, *a.RecursionMisses)
		}
	}
	owned := false
	for _, o := range snap.Owners {
		owned = owned || slices.Contains(o.ProgramIDs, uint32(ids["tracepoint_id"]))
		if o.RecursionMisses != nil {
			t.Errorf("owner %s: recursion misses %d; want absent", o.Key, *o.RecursionMisses)
		}
	}
	if types == 0 || !owned {
		t.Errorf("the snapshot has %d attach types and %d owners, none holding tracepoint %d: no aggregate to check", types, owners, ids["tracepoint_id"])
	}
	if !strings.Contains(ag.Output(), agent.FeatureMisses+": ") {
		t.Errorf("the agent's log does not say this kernel counts no recursion misses")
	}
	// Several exports, then a clean stop.
	time.Sleep(8 * interval)
	snap, err = api.FetchSnapshot(context.Background(), base, "")
	if err != nil {
		t.Fatal(err)
	}
	ag.Stop(t)
	var u unix.Utsname
	unix.Uname(&u)
	for k, v := range map[string]any{"instance": instance, "tracepoint_id": ids["tracepoint_id"], "kprobe_id": ids["kprobe_id"],
		"os_version": unix.ByteSliceToString(u.Release[:]), "scans": snap.Seq,
		"attach_types": types, "owners": owners} {
		t.Logf("metric %s%s=%v", MetricPrefix, k, v)
	}
}

// listed says which of the programs the snapshot lacks, nil when it has
// them all with the tracepoint's runs counted.
func listed(snap *agent.Snapshot, ids map[string]ebpf.ProgramID) error {
	for name, id := range ids {
		i := slices.IndexFunc(snap.Programs, func(p *agent.ProgramStat) bool { return p.ID == uint32(id) })
		if i < 0 {
			return fmt.Errorf("scan %d does not list %s %d", snap.Seq, name, id)
		}
		if name == "tracepoint_id" && snap.Programs[i].RunCount == 0 {
			return fmt.Errorf("scan %d: tracepoint %d has not run yet", snap.Seq, id)
		}
	}
	return nil
}
