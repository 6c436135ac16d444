//go:build lean

package main

import (
	"context"
	"os"
)

// remoteMisses, in the CLI build, runs this same `misses --remote` command
// line in bpfleet-agent instead, as `top --remote` does
// (topremote_lean.go): the API client is net/http. It returns only when
// bpfleet-agent cannot be run.
func remoteMisses(context.Context, string, string, []string) (missSource, error) {
	return nil, execAgentBinary("misses --remote runs in it (the CLI build leaves the API client, net/http, out)", os.Args[1:])
}
