//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/api"
)

// maxHistoryBytes bounds one history answer: 600 points are about 200 KB
// of JSON; more is a wrong URL or a hostile server.
const maxHistoryBytes = 4 << 20

var historyClient = &http.Client{}

// remoteSources reads snapshots and history from the agent's API at remote
// (the CLI build runs bpfleet-agent for this: topremote_lean.go).
func remoteSources(remote, token string) (snapshotSource, historySource, error) {
	src := func(ctx context.Context) (*agent.Snapshot, error) { return api.FetchSnapshot(ctx, remote, token) }
	hist := func(ctx context.Context, id uint32) (*history.Series, error) {
		return fetchHistory(ctx, remote, token, id)
	}
	return src, hist, nil
}

// fetchHistory reads program id's history from a remote agent's API. base
// is the agent URL as --remote takes it (a trailing /v1/snapshot is
// dropped). The caller's context bounds the request.
func fetchHistory(ctx context.Context, base, token string, id uint32) (*history.Series, error) {
	return fetchJSON[history.Series](ctx, base, token, "/v1/programs/"+strconv.FormatUint(uint64(id), 10)+"/history",
		maxHistoryBytes, fmt.Sprintf("history of program %d", id))
}

// fetchJSON GETs one of the agent API's documents at path (relative to
// the agent's base URL, which may name /v1/snapshot) and decodes it; what
// names the document in errors. An error answer is reported with the
// API's own error text.
func fetchJSON[T any](ctx context.Context, base, token, path string, limit int64, what string) (*T, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("agent URL %q: %w", base, err)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/v1/snapshot"), "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := historyClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", what, err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, limit)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
		msg := strings.TrimSpace(string(b))
		var e api.Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, fmt.Errorf("agent %s: %s: %s", u.Host, resp.Status, msg)
	}
	var v T
	if err := json.NewDecoder(body).Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding %s from %s: %w", what, u.Host, err)
	}
	return &v, nil
}
