//go:build !lean

package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
)

// remoteMisses reads a running agent's /v1/misses (the CLI build runs
// bpfleet-agent for this: missesremote_lean.go). Each call returns the
// misses newer than the previous call's, of the programs sels pick (by id
// or name, matched on each miss).
func remoteMisses(remote, token string, sels []string) (missSource, error) {
	var last time.Time
	return func(ctx context.Context) (missBatch, error) {
		l, err := api.FetchMisses(ctx, remote, token)
		if err != nil {
			return missBatch{}, err
		}
		b := missBatch{watch: l.Watch}
		for _, m := range l.Misses {
			if m.Time.After(last) && (len(sels) == 0 || sampleMatch(sels, &m)) {
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

// sampleMatch matches a miss by its program's id or name, as PROG
// selectors do (id:N, name:S or a bare word).
func sampleMatch(sels []string, m *agent.MissSample) bool {
	id := strconv.FormatUint(uint64(m.ProgID), 10)
	for _, s := range sels {
		k, v, ok := strings.Cut(s, ":")
		switch {
		case !ok && (s == id || s == m.ProgName),
			k == "id" && v == id,
			k == "name" && v == m.ProgName,
			k == "owner" && (v == m.Comm || v == m.PodName || v == m.ContainerID):
			return true
		}
	}
	return false
}
