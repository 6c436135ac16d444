package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentExecShim: the CLI build's `agent` runs bpfleet-agent from its
// own directory (a usage error comes back from the agent with its exit
// status), and says in one line what is wrong when that binary is missing
// or is itself a CLI build; so do its `top --remote` (TestTopRemote runs
// it through bpfleet-agent against a real agent) and `fleet`.
func TestAgentExecShim(t *testing.T) {
	bin := bpfleetBin(t)
	out, err := exec.Command(bin, "agent", "--interval", "0s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "--interval=0s") {
		t.Errorf("bpfleet agent --interval 0s: %v\n%s\nwant the agent's usage error, exit status %d", err, out, exitUsage)
	}

	alone := filepath.Join(t.TempDir(), "bpfleet")
	copyFile(t, bin, alone)
	for _, tc := range []struct{ agent, want string }{
		{"", "bpfleet-agent is missing: make build builds it next to bpfleet"},
		{bin, "is a CLI-only build"}, // the CLI build copied as bpfleet-agent
	} {
		if tc.agent != "" {
			copyFile(t, tc.agent, filepath.Join(filepath.Dir(alone), "bpfleet-agent"))
		}
		for _, args := range [][]string{{"agent"}, {"top", "--remote", "http://127.0.0.1:9", "--count", "1"}, {"fleet", "nodes", "--prometheus", "http://127.0.0.1:9"}} {
			out, err := exec.Command(alone, args...).CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if !errors.As(err, &ee) || ee.ExitCode() != exitFailure || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("bpfleet %s (bpfleet-agent %q): %v\n%s\nwant one line saying %q, exit status %d", strings.Join(args, " "), tc.agent, err, out, tc.want, exitFailure)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
