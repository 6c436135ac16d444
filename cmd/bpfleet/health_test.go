package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// health runs `bpfleet health` (the CLI build, which execs bpfleet-agent
// as the chart's probe would run it) and returns its exit status and
// output.
func health(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bpfleetBin(t), append([]string{"health"}, args...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("running bpfleet health: %v", err)
	return 0, ""
}

// waitHealth runs health until it exits with want, or fails the test.
func waitHealth(t *testing.T, within time.Duration, want int, logs *bytes.Buffer, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, out := health(t, args...)
		if code == want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("health %v: exit %d (%q), want %d within %v; agent log:\n%s", args, code, out, want, within, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHealthCommand runs the real agent and its health command against
// it: not live before it listens; live and ready after its first scan;
// not ready, but still live, while its OTLP backend refuses every export;
// ready again once the backend takes them; and not live while the agent
// is frozen (SIGSTOP), as a hung agent is to the kubelet.
func TestHealthCommand(t *testing.T) {
	var refuse atomic.Bool
	var got atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if refuse.Load() {
			// 400 is not retried: each export fails at once.
			http.Error(w, "refused by the test", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	apiArg := "--api-addr=" + addr

	// Nothing listens yet: exit 1, one line.
	if code, out := health(t, apiArg, "--timeout=1s"); code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, "not live") {
		t.Fatalf("health with no agent: exit %d, %q; want 1 and one line saying not live", code, out)
	}

	cmd := exec.Command(bpfleetBin(t), "agent", "--api-addr", addr, "--interval", "500ms", "--calibrate=false", "--no-owners", "--no-maps")
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+backend.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_TIMEOUT=2000")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()

	if out := waitHealth(t, 20*time.Second, 0, &logs, apiArg, "--ready"); !strings.HasPrefix(out, "ready (scan ") {
		t.Errorf("ready answer %q", out)
	}
	if out := waitHealth(t, time.Second, 0, &logs, apiArg); strings.TrimSpace(out) != "live" {
		t.Errorf("live answer %q", out)
	}
	// An unspecified listen host is asked on the loopback.
	_, port, _ := net.SplitHostPort(addr)
	waitHealth(t, time.Second, 0, &logs, "--api-addr=0.0.0.0:"+port)

	// The backend refuses: not ready after ReadyExportFailures exports,
	// still live (a restart would not bring the backend back).
	refuse.Store(true)
	out := waitHealth(t, 20*time.Second, 1, &logs, apiArg, "--ready")
	if !strings.Contains(out, "metric exports failed") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("not-ready answer %q, want one line naming the failed exports", out)
	}
	if code, out := health(t, apiArg); code != 0 {
		t.Errorf("a backend down made the agent not live: exit %d, %q", code, out)
	}
	refuse.Store(false)
	waitHealth(t, 20*time.Second, 0, &logs, apiArg, "--ready")
	if got.Load() == 0 {
		t.Fatal("the backend got no export")
	}

	// Frozen: no answer within the timeout is not live.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code, out := health(t, apiArg, "--timeout=1s"); code != 1 || !strings.Contains(out, "not live") {
		t.Errorf("health of a frozen agent: exit %d, %q; want 1, not live", code, out)
	}
	cmd.Process.Signal(syscall.SIGCONT)
}

// Bad flags are usage errors (exit 2), each named.
func TestHealthFlagErrors(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"--api-addr=nohostport"}},
		{[]string{"--api-addr=127.0.0.1:0"}},
		{[]string{"--timeout=0s"}},
		{[]string{"--timeout=2h"}},
	} {
		code, out := health(t, tc.args...)
		name := strings.SplitN(strings.TrimPrefix(tc.args[0], "--"), "=", 2)[0]
		if code != 2 || !strings.Contains(out, "--"+name) {
			t.Errorf("health %v: exit %d, %q; want 2 naming --%s", tc.args, code, out, name)
		}
	}
}
