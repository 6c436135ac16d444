package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// MaxSnapshotBytes bounds what FetchSnapshot reads: a node with thousands of
// programs is a few MB of JSON; more is a wrong URL or a hostile server.
const MaxSnapshotBytes = 64 << 20

var defaultClient = &http.Client{Timeout: 30 * time.Second}

// FetchSnapshot reads the latest snapshot from a remote agent's API.
// base is the agent's URL, e.g. "http://10.0.0.7:9808"; a URL that already
// ends in /v1/snapshot is used as it is. token may be empty for a loopback
// agent without one.
func FetchSnapshot(ctx context.Context, base, token string) (*agent.Snapshot, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("agent URL %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("agent URL %q: want http:// or https://", base)
	}
	if !strings.HasSuffix(u.Path, "/v1/snapshot") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/snapshot"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := defaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching snapshot: %w", err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, MaxSnapshotBytes+1)
	if resp.StatusCode != http.StatusOK {
		var e Error
		b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, fmt.Errorf("fetching snapshot from %s: %s: %s", u.Host, resp.Status, msg)
	}
	return DecodeSnapshot(body, u.Host)
}

// DecodeSnapshot decodes one snapshot as the API serves it, reading at
// most MaxSnapshotBytes (beyond that it is "truncated or too large"). from
// names the source in errors. It never panics on hostile input
// (FuzzDecodeSnapshot).
func DecodeSnapshot(r io.Reader, from string) (*agent.Snapshot, error) {
	var snap agent.Snapshot
	dec := json.NewDecoder(io.LimitReader(r, MaxSnapshotBytes+1))
	if err := dec.Decode(&snap); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("decoding snapshot from %s: truncated or larger than %d bytes", from, MaxSnapshotBytes)
		}
		return nil, fmt.Errorf("decoding snapshot from %s: %w", from, err)
	}
	// A null program decodes as nil; readers of a snapshot expect an
	// entry for each program, as a []ProgramStat decoded it.
	for i, p := range snap.Programs {
		if p == nil {
			snap.Programs[i] = &agent.ProgramStat{}
		}
	}
	return &snap, nil
}
