package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// progIDMarker loads and frees a trivial program and returns its id.
// Program ids are allocated cyclically, so the gap between two markers is
// 1 exactly when no program was loaded in between, even one freed since.
func progIDMarker(t *testing.T) uint32 {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "MIT", Name: "badinput_mark",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()}})
	if err != nil {
		t.Fatalf("loading the marker program: %v", err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

// TestBadInputRefusedAtStart runs the real binary with every bad input
// the issue named and more: each must exit 2 with exactly one line on
// stderr naming the flag or variable, no stack trace, nothing on stdout,
// and nothing started. "Nothing started" is checked two ways: the API port
// the agent is given is held by the test, so an agent that bound (or
// loaded anything) before validating would fail with a different error;
// and no BPF program may be loaded during the run (program id markers).
func TestBadInputRefusedAtStart(t *testing.T) {
	bin := bpfleetBin(t)
	dir := t.TempDir()
	shortToken := filepath.Join(dir, "short-token")
	os.WriteFile(shortToken, []byte("short\n"), 0o600)
	emptyToken := filepath.Join(dir, "empty-token")
	os.WriteFile(emptyToken, []byte("\n"), 0o600)

	// The agent's API port, held for the whole test.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	apiAddr := held.Addr().String()

	type tc struct {
		args []string
		env  []string
		name string // the flag or variable the line must name
	}
	agent := func(name string, env []string, args ...string) tc {
		a := append([]string{"agent", "--api-addr", apiAddr}, args...)
		return tc{a, env, name}
	}
	cases := []tc{
		// Named in the issue.
		agent("--interval", nil, "--interval=1ns"),
		agent("--otlp-endpoint", nil, "--otlp-endpoint", "not a url"),
		agent("OTEL_EXPORTER_OTLP_ENDPOINT", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=not a url"}),
		agent("OTEL_METRICS_EXPORTER", []string{"OTEL_METRICS_EXPORTER=nope", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}),
		agent("OTEL_METRIC_EXPORT_INTERVAL", []string{"OTEL_METRIC_EXPORT_INTERVAL=abc"}),
		agent("OTEL_EXPORTER_OTLP_HEADERS", []string{"OTEL_EXPORTER_OTLP_HEADERS=garbage"}),
		agent("--proc-root", nil, "--proc-root", "/nonexistent"),
		agent("--bpffs", nil, "--bpffs", "/nonexistent"),
		{[]string{"list", "--watch", "-o", "jsonl", "-n=-1"}, nil, "--count"},
		agent("--api-token-file", nil, "--api-token-file", shortToken),
		agent("--api-addr", nil, "--api-addr", "0.0.0.0:"+strings.Split(apiAddr, ":")[1]),
		// More of the agent's flags.
		agent("--interval", nil, "--interval=0s"),
		agent("--interval", nil, "--interval=abc"),
		agent("--export-interval", nil, "--export-interval=10ms"),
		agent("--map-interval", nil, "--map-interval=-1s"),
		agent("--resend-unchanged", nil, "--resend-unchanged=-1s"),
		agent("--otlp-endpoint", nil, "--otlp-endpoint", "ftp://collector:4318"),
		agent("--otlp-endpoint", nil, "--otlp-endpoint", "http://"),
		agent("--otlp-endpoint", nil, "--otlp-endpoint", "collector:4318"), // host:port is for grpc only
		agent("--otlp-protocol", nil, "--otlp-protocol", "http/json"),
		agent("--otlp-protocol", nil, "--otlp-protocol", "udp"),
		agent("--proc-root", nil, "--proc-root", "/tmp"),
		agent("--metrics-level", nil, "--metrics-level", "pods"),
		agent("--max-programs", nil, "--max-programs", "-1"),
		agent("--quiet-intervals", nil, "--quiet-intervals", "0"),
		agent("--scan-source", nil, "--scan-source", "bpftool"),
		{[]string{"list", "--scan-source", "iterator", "--no-iterator"}, nil, "--scan-source"},
		agent("--shutdown-timeout", nil, "--shutdown-timeout", "0s"),
		agent("--api-token-file", nil, "--api-token-file", filepath.Join(dir, "missing")),
		agent("--api-token-file", nil, "--api-token-file", emptyToken),
		{[]string{"agent", "--api-addr", "nohostport"}, nil, "--api-addr"},
		{[]string{"agent", "--api-addr", "evil.example:9808"}, nil, "--api-addr"},
		agent("BPFLEET_API_TOKEN", []string{"BPFLEET_API_TOKEN=short"}),
		// The stats, profile and pprof settings, checked with the rest.
		agent("--stats", nil, "--stats=sometimes"),
		agent("--stats-window", nil, "--stats=sampled", "--stats-window=0s"),
		agent("--stats-window", nil, "--stats=sampled", "--stats-window=20s", "--stats-period=10s"),
		agent("--stats-period", nil, "--stats=sampled", "--stats-period=-1s"),
		agent("--profile", nil, "--profile", "id:x"),
		agent("--profile", nil, "--profile", "colour:red"),
		agent("--profile-window", nil, "--profile-window=-1s"),
		agent("--profile-window", nil, "--profile-window=20s", "--profile-period=10s"),
		agent("--miss-budget", nil, "--miss-budget=0"),
		agent("--miss-budget", nil, "--miss-watch=false", "--miss-budget=-1"),
		agent("--miss-budget", nil, "--miss-budget=lots"),
		agent("--miss-watch", nil, "--miss-watch=maybe"),
		{[]string{"misses", "--interval=1ns"}, nil, "--interval"},
		{[]string{"misses", "-o", "yaml"}, nil, "--output"},
		{[]string{"misses", "id:x"}, nil, "PROG"},
		{[]string{"misses", "--remote", "not a url"}, nil, "--remote"},
		agent("--pprof", nil, "--pprof", "0.0.0.0:6060"),
		agent("--pprof", nil, "--pprof", "nohostport"),
		agent("--pprof", nil, "--pprof", "127.0.0.1:99999"),
		agent("--no-such-flag", nil, "--no-such-flag"),
		agent("stray", nil, "stray"),
		// More OTEL_* variables the SDK would only warn about.
		agent("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", []string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=collector:4318"}),
		agent("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://:4318"}),
		agent("OTEL_EXPORTER_OTLP_PROTOCOL", []string{"OTEL_EXPORTER_OTLP_PROTOCOL=http/json"}),
		agent("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift"}),
		agent("OTEL_TRACES_EXPORTER", []string{"OTEL_TRACES_EXPORTER=prometheus"}),
		agent("OTEL_METRICS_EXPORTER", []string{"OTEL_METRICS_EXPORTER=otlp,console"}),
		agent("OTEL_METRIC_EXPORT_INTERVAL", []string{"OTEL_METRIC_EXPORT_INTERVAL=10"}),
		agent("OTEL_METRIC_EXPORT_TIMEOUT", []string{"OTEL_METRIC_EXPORT_TIMEOUT=-1"}),
		agent("OTEL_EXPORTER_OTLP_METRICS_HEADERS", []string{"OTEL_EXPORTER_OTLP_METRICS_HEADERS=a=%zz"}),
		agent("OTEL_EXPORTER_OTLP_TIMEOUT", []string{"OTEL_EXPORTER_OTLP_TIMEOUT=10s"}),
		agent("OTEL_EXPORTER_OTLP_COMPRESSION", []string{"OTEL_EXPORTER_OTLP_COMPRESSION=zstd"}),
		agent("OTEL_EXPORTER_OTLP_INSECURE", []string{"OTEL_EXPORTER_OTLP_INSECURE=maybe"}),
		agent("OTEL_EXPORTER_OTLP_CERTIFICATE", []string{"OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent.pem"}),
		agent("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", []string{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta"}),
		agent("OTEL_RESOURCE_ATTRIBUTES", []string{"OTEL_RESOURCE_ATTRIBUTES=novalue"}),
		agent("OTEL_SDK_DISABLED", []string{"OTEL_SDK_DISABLED=yes"}),
		agent("OTEL_TRACES_SAMPLER", []string{"OTEL_TRACES_SAMPLER=sometimes"}),
		agent("OTEL_TRACES_SAMPLER_ARG", []string{"OTEL_TRACES_SAMPLER_ARG=2"}),
		agent("OTEL_BSP_MAX_QUEUE_SIZE", []string{"OTEL_BSP_MAX_QUEUE_SIZE=big"}),
		agent("OTEL_SPAN_EVENT_COUNT_LIMIT", []string{"OTEL_SPAN_EVENT_COUNT_LIMIT=many"}),
		// list
		{[]string{"list", "-o", "yaml"}, nil, "--output"},
		{[]string{"list", "--watch", "--interval", "1ms"}, nil, "--interval"},
		{[]string{"list", "-n", "3"}, nil, "--count"},
		{[]string{"list", "--proc-root", "/nonexistent"}, nil, "--proc-root"},
		{[]string{"list", "--quiet-intervals", "x"}, nil, "--quiet-intervals"},
		// maps
		{[]string{"maps", "-o", "yaml"}, nil, "--output"},
		{[]string{"maps", "--sort", "size"}, nil, "--sort"},
		{[]string{"maps", "--watch", "--interval", "1ms"}, nil, "--interval"},
		{[]string{"maps", "--interval", "1s"}, nil, "--interval"},
		{[]string{"maps", "--prog", "-1"}, nil, "--prog"},
		{[]string{"maps", "--no-maps"}, nil, "--no-maps"},
		{[]string{"maps", "--map-count-bound", "-1"}, nil, "--map-count-bound"},
		// top
		{[]string{"top", "--interval", "10ms"}, nil, "--interval"},
		{[]string{"top", "--sort", "bogus"}, nil, "--sort"},
		{[]string{"top", "--remote", "ftp://10.0.0.7:9808"}, nil, "--remote"},
		{[]string{"top", "--remote", "http://"}, nil, "--remote"},
		{[]string{"top", "--token-file", shortToken}, nil, "--token-file"},
		{[]string{"top", "--remote", "http://127.0.0.1:9", "--token-file", shortToken}, nil, "--token-file"},
		{[]string{"top", "-n", "-1"}, nil, "--count"},
		{[]string{"top", "--bpffs", "/nonexistent"}, nil, "--bpffs"},
		{[]string{"top", "--profile", "id:x"}, nil, "--profile"},
		// profile
		{[]string{"profile", "id:x"}, nil, "PROG"},
		{[]string{"profile", "--window=-1s", "xdp"}, nil, "--window"},
		{[]string{"profile", "--window=20s", "--period=10s", "xdp"}, nil, "--window"},
		{[]string{"profile", "--interval=0s", "xdp"}, nil, "--interval"},
		{[]string{"profile", "--count=-1", "xdp"}, nil, "--count"},
		// probe
		{[]string{"probe", "-o", "yaml"}, nil, "--output"},
		{[]string{"probe", "stray"}, nil, "stray"},
		// bench
		{[]string{"bench", "--mode", "fast"}, nil, "--mode"},
		{[]string{"bench", "--stats", "maybe"}, nil, "--stats"},
		{[]string{"bench", "--attach-types", "fentry,bogus"}, nil, "--attach-types"},
		{[]string{"bench", "--rounds", "0"}, nil, "--rounds"},
		{[]string{"bench", "--calls", "-5"}, nil, "--calls"},
		{[]string{"bench", "--batch", "0"}, nil, "--batch"},
		{[]string{"bench", "-o", "yaml"}, nil, "--output"},
		// the root command
		{[]string{"nope"}, nil, "nope"},
	}

	// The caller's OTEL_* settings and token must not leak into the cases.
	var baseEnv []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "BPFLEET_") && !strings.HasPrefix(kv, "K8S_") {
			baseEnv = append(baseEnv, kv)
		}
	}
	run := func(c tc) (stdout, stderr string, code int, loaded bool) {
		before := progIDMarker(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, c.args...)
		cmd.Env = append(append([]string{}, baseEnv...), c.env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			code = 0
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("%v: %v", c.args, err)
		}
		return out.String(), errb.String(), code, progIDMarker(t) != before+1
	}
	for _, c := range cases {
		stdout, stderr, code, loaded := run(c)
		if loaded {
			// Another process on the node may have loaded a program in
			// between: ask once more before blaming bpfleet.
			stdout, stderr, code, loaded = run(c)
		}
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		switch {
		case code != 2:
			t.Errorf("%v %v: exit status %d, want 2; stderr:\n%s", c.env, c.args, code, stderr)
		case len(lines) != 1 || lines[0] == "":
			t.Errorf("%v %v: %d lines on stderr, want exactly one:\n%s", c.env, c.args, len(lines), stderr)
		case !strings.HasPrefix(lines[0], "bpfleet: ") || !strings.Contains(lines[0], c.name):
			t.Errorf("%v %v: stderr %q does not name %s", c.env, c.args, lines[0], c.name)
		case strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic"):
			t.Errorf("%v %v: stack trace on stderr:\n%s", c.env, c.args, stderr)
		case stdout != "":
			t.Errorf("%v %v: wrote to stdout: %q", c.env, c.args, stdout)
		case loaded:
			t.Errorf("%v %v: a BPF program was loaded before the input was refused", c.env, c.args)
		}
	}
	t.Logf("%d bad inputs refused at start, each with one line and exit status 2", len(cases))
	if len(cases) < 30 {
		t.Errorf("only %d cases", len(cases))
	}
}

// TestAllProblemsAtOnce: one run reports every bad input, one line each,
// rather than one per try.
func TestAllProblemsAtOnce(t *testing.T) {
	bin := bpfleetBin(t)
	cmd := exec.Command(bin, "agent", "--interval=1ns", "--metrics-level=pods", "--max-programs=-1", "--proc-root=/nonexistent",
		"--api-addr=0.0.0.0:9808", "--otlp-endpoint=not a url", "--stats=sampled", "--stats-window=0s", "--profile=id:x",
		"--profile-window=-1s", "--pprof=0.0.0.0:6060")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OTEL_METRICS_EXPORTER=nope", "OTEL_METRIC_EXPORT_INTERVAL=abc"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want status 2; stderr:\n%s", err, stderr.String())
	}
	want := []string{"--interval", "--metrics-level", "--max-programs", "--proc-root", "--api-addr", "--otlp-endpoint", "OTEL_METRICS_EXPORTER", "OTEL_METRIC_EXPORT_INTERVAL",
		"--stats-window", "--profile", "--profile-window", "--pprof"}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d lines, want %d:\n%s", len(lines), len(want), stderr.String())
	}
	for _, name := range want {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "bpfleet: "+name+"=") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines start with %s=, want 1:\n%s", n, name, stderr.String())
		}
	}
}
