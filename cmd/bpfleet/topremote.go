//go:build !lean

package main

import (
	"context"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/api"
)

// remoteSources reads snapshots and history from the agent's API at remote
// with api's client (the CLI build runs bpfleet-agent for this:
// topremote_lean.go).
func remoteSources(remote, token string) (snapshotSource, historySource, error) {
	src := func(ctx context.Context) (*agent.Snapshot, error) { return api.FetchSnapshot(ctx, remote, token) }
	hist := func(ctx context.Context, id uint32) (*history.Series, error) {
		return api.FetchHistory(ctx, remote, token, id)
	}
	return src, hist, nil
}
