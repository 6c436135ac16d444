// Package guestagent runs the real bpfleet agent inside a kernel-matrix
// guest, for the guest halves of exporter/e2e's guest tests
// (test/kernels/exportcauses, test/kernels/exportabsent,
// test/kernels/exportevictions): the harness's
// -agent puts the binary at Bin.
package guestagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/syncbuf"
)

const (
	Bin     = "/bin/bpfleet"
	APIAddr = "127.0.0.1:7070" // the agent's API, as Start runs it
)

// Agent is a running `bpfleet agent`.
type Agent struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan error
}

// Start runs `bpfleet agent` with its API on APIAddr and args after it,
// env added to the environment. The test's cleanup kills it if it still
// runs and logs what it wrote.
func Start(t *testing.T, env []string, args ...string) *Agent {
	t.Helper()
	a := &Agent{out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	a.cmd = exec.Command(Bin, append([]string{"agent", "--api-addr", APIAddr}, args...)...)
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		t.Logf("agent output:\n%s", a.out.String())
	})
	return a
}

// Output is what the agent has written so far.
func (a *Agent) Output() string { return a.out.String() }

// Stop sends SIGTERM (the agent flushes its exports) and waits: an agent
// that exits with an error or not within 60 s fails the test.
func (a *Agent) Stop(t *testing.T) {
	t.Helper()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		if err != nil {
			t.Errorf("agent exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("agent did not stop within 60s of SIGTERM")
	}
}

// Instance is a service.instance.id of its own: a retried boot exports to
// the same backends, and the host half queries this boot's series.
func Instance() string {
	nonce := make([]byte, 4)
	rand.Read(nonce)
	return "guest-" + hex.EncodeToString(nonce)
}

// Wait calls f every 100 ms until it returns nil, failing the test with
// f's last error after limit.
func Wait(t *testing.T, limit time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Get decodes the agent's API answer at path (e.g. /v1/maps) into v.
func Get(path string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+APIAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
