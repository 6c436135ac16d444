//go:build lean

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// The CLI build (-tags lean: list, top, probe, profile, bench, version)
// leaves the agent out: the agent links the OTLP exporters, gRPC, the
// Prometheus client and client-go, whose package initialisation alone
// costs a one-shot command ~3 ms, more than a `bpfleet list` of 1,000
// programs itself. `bpfleet agent ...` execs bpfleet-agent (this package
// built without tags: every command, the agent in-process) found next to
// this executable, so the chart, scripts and tests that run `bpfleet agent`
// keep working: same arguments, same pid, same signals and exit status.
// `bpfleet top --remote` does the same (topremote_lean.go): the API client
// is net/http, left out of the CLI build too.

// agentBinary is the agent's executable name, next to bpfleet.
const agentBinary = "bpfleet-agent"

// execGuard is set in the agent's environment: a bpfleet-agent that is
// itself a CLI build would otherwise exec itself forever.
const execGuard = "BPFLEET_EXEC_AGENT"

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:                "agent",
		Short:              "Run the node agent: scan every interval, export to OpenTelemetry (runs " + agentBinary + ")",
		DisableFlagParsing: true, // every flag is the agent's
		RunE: func(_ *cobra.Command, args []string) error {
			return execAgentBinary("the agent is its own binary", append([]string{"agent"}, args...))
		},
	})
}

// execAgentBinary runs bpfleet-agent, found next to this executable, with
// args in place of this process; it returns only when that fails, saying
// why (what needs bpfleet-agent) when the binary is missing.
func execAgentBinary(why string, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding %s: %w", agentBinary, err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	bin := filepath.Join(filepath.Dir(self), agentBinary)
	if os.Getenv(execGuard) != "" {
		return fmt.Errorf("%s is a CLI-only build (-tags lean) of bpfleet: build the agent with make build", bin)
	}
	env := append(os.Environ(), execGuard+"=1")
	err = syscall.Exec(bin, append([]string{bin}, args...), env)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s and %s is missing: make build builds it next to bpfleet", why, bin)
	}
	return fmt.Errorf("running %s: %w", bin, err)
}
