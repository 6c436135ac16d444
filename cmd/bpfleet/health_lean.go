//go:build lean

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/internal/config"
)

// runHealth, in the CLI build, runs this same `health` command line in
// bpfleet-agent (agent_exec.go): the HTTP client is net/http, left out of
// the CLI build. The chart's probes run /bpfleet-agent health directly.
func runHealth(*cobra.Command, config.Health) error {
	return execAgentBinary("health runs in it (the CLI build leaves the API client, net/http, out)", os.Args[1:])
}
