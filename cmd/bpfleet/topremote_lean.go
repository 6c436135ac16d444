//go:build lean

package main

import "os"

// remoteSources, in the CLI build, runs this same `top --remote` command
// line in bpfleet-agent instead (agent_exec.go): the API client is
// net/http and crypto/tls, whose package initialisation and size would
// cost every one-shot `bpfleet list` ~0.25 ms if linked here (make bench
// BENCH=list). Arguments, pid, terminal and exit status stay the same. It
// returns only when bpfleet-agent cannot be run.
func remoteSources(string, string) (snapshotSource, historySource, error) {
	return nil, nil, execAgentBinary("top --remote runs in it (the CLI build leaves the API client, net/http, out)", os.Args[1:])
}
