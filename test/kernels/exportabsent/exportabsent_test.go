package exportabsent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/internal/syncbuf"
	"github.com/bpfleet/bpfleet/test/canary"
)

const (
	agentBin = "/bin/bpfleet" // the harness's -agent puts it there
	apiAddr  = "127.0.0.1:7070"
	interval = 500 * time.Millisecond
)

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

	nonce := make([]byte, 4)
	rand.Read(nonce)
	instance := "guest-" + hex.EncodeToString(nonce)
	out := &syncbuf.Buffer{}
	// Stats always on, so the tracepoint's runs are counted; the default
	// metrics level (workload), as the chart runs it.
	cmd := exec.Command(agentBin, "agent", "--interval", interval.String(), "--stats", "always",
		"--api-addr", apiAddr, "--calibrate=false")
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="+metrics,
		"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=none",
		"OTEL_METRIC_EXPORT_INTERVAL=500",
		"OTEL_RESOURCE_ATTRIBUTES=service.instance.id="+instance)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		t.Logf("agent output:\n%s", out.String())
	}()

	// Runs for the tracepoint, then a snapshot that shows both programs.
	var snap *agent.Snapshot
	deadline := time.Now().Add(60 * time.Second)
	for {
		unix.Getppid()
		snap, err = api.FetchSnapshot(context.Background(), "http://"+apiAddr, "")
		if err == nil && listed(snap, ids) == nil {
			break
		}
		if err == nil {
			err = listed(snap, ids)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's snapshot within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.ContainsFunc(snap.Degraded, func(d string) bool { return strings.HasPrefix(d, agent.FeatureMisses+": ") }) {
		t.Errorf("the snapshot's Degraded lines do not say this kernel counts no recursion misses: %q", snap.Degraded)
	}
	for _, p := range snap.Programs {
		if p.RecursionMisses != nil || p.MissCauses != nil {
			t.Errorf("program %d (%s): recursion misses %v, causes %v; want both absent", p.ID, p.Name, p.RecursionMisses, p.MissCauses)
		}
	}
	if !strings.Contains(out.String(), agent.FeatureMisses+": ") {
		t.Errorf("the agent's log does not say this kernel counts no recursion misses")
	}
	// Several exports, then a clean stop.
	time.Sleep(8 * interval)
	snap, err = api.FetchSnapshot(context.Background(), "http://"+apiAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("agent did not stop within 60s of SIGTERM")
	}
	var u unix.Utsname
	unix.Uname(&u)
	for k, v := range map[string]any{"instance": instance, "tracepoint_id": ids["tracepoint_id"], "kprobe_id": ids["kprobe_id"],
		"os_version": unix.ByteSliceToString(u.Release[:]), "scans": snap.Seq} {
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
