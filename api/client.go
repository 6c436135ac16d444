package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
)

// MaxSnapshotBytes bounds what FetchSnapshot reads: a node with thousands of
// programs is a few MB of JSON; more is a wrong URL or a hostile server.
const MaxSnapshotBytes = 64 << 20

var defaultClient = &http.Client{Timeout: 30 * time.Second}

// documentClient fetches the other documents (history, misses): the
// caller's context bounds each request.
var documentClient = &http.Client{}

// Bounds of one answer: 600 history points are about 200 KB of JSON, 1,024
// misses with their stacks under 2 MB; more is a wrong URL or a hostile
// server.
const (
	maxHistoryBytes = 4 << 20
	maxMissesBytes  = 8 << 20
)

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
	resp, err := getJSON(ctx, defaultClient, u, token, "snapshot")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, MaxSnapshotBytes+1)
	if resp.StatusCode != http.StatusOK {
		return nil, statusError("fetching snapshot from "+u.Host, resp, body)
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

// FetchHistory reads program id's history from a remote agent's API. base
// is the agent URL as FetchSnapshot takes it (a trailing /v1/snapshot is
// dropped). The caller's context bounds the request.
func FetchHistory(ctx context.Context, base, token string, id uint32) (*history.Series, error) {
	return fetchDocument[history.Series](ctx, base, token, "/v1/programs/"+strconv.FormatUint(uint64(id), 10)+"/history",
		maxHistoryBytes, fmt.Sprintf("history of program %d", id))
}

// FetchMisses reads a remote agent's /v1/misses.
func FetchMisses(ctx context.Context, base, token string) (*MissList, error) {
	return fetchDocument[MissList](ctx, base, token, "/v1/misses", maxMissesBytes, "misses")
}

// fetchDocument GETs one of the agent API's documents at path (relative to
// the agent's base URL, which may name /v1/snapshot) and decodes it; what
// names the document in errors. An error answer is reported with the
// API's own error text.
func fetchDocument[T any](ctx context.Context, base, token, path string, limit int64, what string) (*T, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("agent URL %q: %w", base, err)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/v1/snapshot"), "/") + path
	resp, err := getJSON(ctx, documentClient, u, token, what)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, limit)
	if resp.StatusCode != http.StatusOK {
		return nil, statusError("agent "+u.Host, resp, body)
	}
	var v T
	if err := json.NewDecoder(body).Decode(&v); err != nil {
		return nil, fmt.Errorf("decoding %s from %s: %w", what, u.Host, err)
	}
	return &v, nil
}

// getJSON GETs u as JSON with token (if any) as the bearer token; what names
// the document in errors. The caller closes the answer's body.
func getJSON(ctx context.Context, c *http.Client, u *url.URL, token, what string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", what, err)
	}
	return resp, nil
}

// statusError is a non-200 answer as an error: head, the status and the
// API's own error text (else the body's first 4 KB).
func statusError(head string, resp *http.Response, body io.Reader) error {
	b, _ := io.ReadAll(io.LimitReader(body, 4<<10))
	msg := strings.TrimSpace(string(b))
	var e Error
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return fmt.Errorf("%s: %s: %s", head, resp.Status, msg)
}
