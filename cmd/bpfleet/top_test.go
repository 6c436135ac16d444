package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/creack/pty"
)

// buildBinary builds bpfleet once per test run, as the Makefile ships it
// (static, stripped): the CLI build (-tags lean) and, next to it,
// bpfleet-agent, which its `agent` command execs.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "bpfleet-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bpfleet")
	for _, args := range [][]string{{"-tags", "lean", "-o", bin}, {"-o", bin + "-agent"}} {
		cmd := exec.Command("go", append(append([]string{"build", "-trimpath", "-ldflags", "-s -w"}, args...), ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", errors.New(string(out))
		}
	}
	return bin, nil
})

func bpfleetBin(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("building bpfleet: %v", err)
	}
	return bin
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// screen collects a pty's output and returns its last full frame.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) lastFrame() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.buf.String()
	if i := strings.LastIndex(out, "\x1b[H\x1b[2J"); i >= 0 {
		out = out[i:]
	}
	return strings.ReplaceAll(ansi.ReplaceAllString(out, ""), "\r", "")
}

// waitFor polls the screen until cond holds on the last frame.
func (s *screen) waitFor(t *testing.T, what string, cond func(frame string) bool) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if f := s.lastFrame(); cond(f) {
			return f
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("screen never showed %s; last frame:\n%s", what, s.lastFrame())
	return ""
}

func programRow(frame string, id uint32) []string {
	for _, l := range strings.Split(frame, "\n") {
		f := strings.Fields(l)
		if len(f) >= 10 && f[0] == strconv.FormatUint(uint64(id), 10) {
			return f
		}
	}
	return nil
}

// TestTopInPty drives `bpfleet top` in a real pseudo-terminal while the
// recursion canary misses: its row must show a live run rate and miss rate,
// and the sort and quit keys must work.
func TestTopInPty(t *testing.T) {
	bin := bpfleetBin(t)
	c, id := canarytest.Load(t)

	stop := make(chan struct{})
	var trigger sync.WaitGroup
	defer func() { close(stop); trigger.Wait() }() // before the canary's cleanup closes it
	trigger.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				c.Trigger(5)
			}
		}
	})

	cmd := exec.Command(bin, "top", "--interval", "300ms", "--no-owners")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 200, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	scr := &screen{}
	go func() { _, _ = copyAll(scr, tty) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	frame := scr.waitFor(t, "the canary with a miss rate", func(f string) bool {
		row := programRow(f, id)
		return row != nil && row[8] != "0" && row[5] != "0"
	})
	row := programRow(frame, id)
	if row[1] != "canary" || row[3] != "tp_btf" || row[4] != "bpf_trace_printk" {
		t.Errorf("canary row = %v", row)
	}
	if !strings.Contains(frame, "sort: cpu") {
		t.Errorf("default sort is not cpu:\n%s", frame)
	}

	if _, err := tty.Write([]byte("m")); err != nil {
		t.Fatal(err)
	}
	frame = scr.waitFor(t, "sort by misses", func(f string) bool { return strings.Contains(f, "sort: misses") })
	// Sorted by misses, the canary (the only program missing here) is first.
	var first []string
	for _, l := range strings.Split(frame, "\n") {
		if f := strings.Fields(l); len(f) >= 10 && f[0] != "ID" {
			if _, err := strconv.Atoi(f[0]); err == nil {
				first = f
				break
			}
		}
	}
	if first == nil || first[0] != strconv.FormatUint(uint64(id), 10) {
		t.Errorf("first row sorted by misses = %v, want the canary %d", first, id)
	}

	if _, err := tty.Write([]byte("/canary\r")); err != nil {
		t.Fatal(err)
	}
	scr.waitFor(t, "the filter applied", func(f string) bool { return strings.Contains(f, "filter: canary") && programRow(f, id) != nil })

	if _, err := tty.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("top exited with %v after q", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("top did not quit on q")
	}
}

func copyAll(w *screen, r *os.File) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			w.Write(buf[:k])
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// TestTopPlainWhenNotATerminal: with stdout a pipe, top prints plain lines.
func TestTopPlainWhenNotATerminal(t *testing.T) {
	bin := bpfleetBin(t)
	c, id := canarytest.Load(t)
	triggered := make(chan struct{})
	go func() { defer close(triggered); c.Trigger(50) }()
	defer func() { <-triggered }() // before the canary's cleanup closes it
	out, err := exec.Command(bin, "top", "--interval", "200ms", "--count", "2", "--no-owners", "--filter", "canary").Output()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("\x1b[")) {
		t.Errorf("plain output has escape sequences: %q", out)
	}
	if programRow(string(out), id) == nil || !bytes.Contains(out, []byte("sort: cpu")) {
		t.Errorf("plain output lacks the canary row:\n%s", out)
	}
}

// TestTopRemote: top --remote reads a real agent's snapshots through the
// API (served here in-process from real scans) and shows the canary's
// misses, with the bearer token the API requires.
func TestTopRemote(t *testing.T) {
	bin := bpfleetBin(t)
	c, id := canarytest.Load(t)
	addr, tokenFile := serveAgent(t, c, 50*time.Millisecond, nil)
	out, err := exec.Command(bin, "top", "--remote", "http://"+addr, "--token-file", tokenFile,
		"--interval", "200ms", "--count", "3", "--filter", "canary").CombinedOutput()
	if err != nil {
		t.Fatalf("top --remote: %v\n%s", err, out)
	}
	frames := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	row := programRow(frames[len(frames)-1], id)
	if row == nil || row[9] == "0" {
		t.Errorf("top --remote shows no misses for the canary:\n%s", out)
	}
	if _, err := exec.Command(bin, "top", "--remote", "http://"+addr, "--count", "1").Output(); err == nil {
		t.Error("top --remote without the token succeeded")
	}
}

// serveAgent runs a real agent in-process behind the real API (token
// required), scanning every `every` while it triggers the canary c five
// times a scan, with store (optional) recording each snapshot's history.
// It returns the API's address and a file holding the token; everything
// stops before the canary is closed.
func serveAgent(t *testing.T, c *canary.Canary, every time.Duration, store *history.Store) (addr, tokenFile string) {
	t.Helper()
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	var latest atomic.Pointer[agent.Snapshot]
	const token = "0123456789abcdef-test-token"
	opts := api.Options{Addr: "127.0.0.1:0", Token: token, Snapshot: latest.Load}
	if store != nil {
		opts.History = store.Series
	}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Serve(ctx)
	var scans sync.WaitGroup
	t.Cleanup(func() { cancel(); scans.Wait() }) // runs before the canary's and agent's cleanups
	scans.Go(func() {
		for ctx.Err() == nil {
			c.Trigger(5)
			if s, err := a.Scan(ctx); err == nil {
				if store != nil {
					store.Record(s)
				}
				latest.Store(s)
			}
			time.Sleep(every)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); latest.Load() == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	tokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return l.String(), tokenFile
}
