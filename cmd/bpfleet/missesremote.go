//go:build !lean

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
)

// remoteMisses reads a running agent's /v1/misses (the CLI build runs
// bpfleet-agent for this: missesremote_lean.go). Each call returns the
// misses newer than the previous call's, of the programs sels pick: the
// selectors of a local `misses PROG...` and of `profile`
// (agent.SelectPrograms), matched once against the agent's programs
// (/v1/snapshot), as the local command matches them at its first scan.
func remoteMisses(ctx context.Context, remote, token string, sels []string) (missSource, error) {
	var ids []uint32
	if len(sels) > 0 {
		s, err := api.FetchSnapshot(ctx, remote, token)
		if err != nil {
			return nil, fmt.Errorf("finding the programs to show: %w", err)
		}
		if ids = agent.SelectPrograms(sels, s.Programs); len(ids) == 0 {
			return nil, fmt.Errorf("no program on %s matches %s", remote, strings.Join(sels, " "))
		}
	}
	var last time.Time
	return func(ctx context.Context) (missBatch, error) {
		l, err := api.FetchMisses(ctx, remote, token)
		if err != nil {
			return missBatch{}, err
		}
		b := missBatch{watch: l.Watch}
		for _, m := range l.Misses {
			if m.Time.After(last) && (len(sels) == 0 || slices.Contains(ids, m.ProgID)) {
				b.misses = append(b.misses, m)
			}
		}
		for _, m := range l.Misses {
			if m.Time.After(last) {
				last = m.Time
			}
		}
		return b, nil
	}, nil
}
