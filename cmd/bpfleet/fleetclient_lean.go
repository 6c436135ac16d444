//go:build lean

package main

import (
	"os"

	"github.com/bpfleet/bpfleet/internal/config"
)

// newFleetClient, in the CLI build, runs this same `fleet` command line in
// bpfleet-agent instead (agent_exec.go), as `top --remote` does: the
// query API's client is net/http, crypto/tls and client_golang, whose
// package initialisation would cost every one-shot `bpfleet list` (see
// docs/performance.md). It returns only when bpfleet-agent cannot run.
func newFleetClient(*config.Fleet) (querier, error) {
	return nil, execAgentBinary("bpfleet fleet runs in it (the CLI build leaves the query API's client, net/http, out)", os.Args[1:])
}
