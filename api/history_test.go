package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// TestHistoryRoute: the route serves what the store holds, and answers an
// unknown id, a malformed one and a server without a store the way the
// other routes do (JSON error bodies).
func TestHistoryRoute(t *testing.T) {
	first := fixture()
	first.Interval = 0
	second := fixture()
	second.Seq, second.Time = 8, first.Time.Add(10*time.Second)
	store := history.New(history.Capacity(history.Window, 10*time.Second))
	store.Record(first)
	store.Record(second)
	h := newTestServer(t, Options{Snapshot: func() *agent.Snapshot { return second }, History: store.Series}).Handler()

	w := get(t, h, "/v1/programs/20/history")
	if w.Code != 200 {
		t.Fatalf("/v1/programs/20/history: %d %s", w.Code, w.Body)
	}
	s := decode[history.Series](t, w)
	if s.ID != 20 || s.Name != "canary" || len(s.Points) != 1 || s.Capacity != 30 || s.UnloadedAt != nil {
		t.Fatalf("history of 20 = %+v", s)
	}
	if p := s.Points[0]; p.RecursionMisses == nil || *p.RecursionMisses != 25 || p.Runs != 25 || p.RecursionMissesPerSec == nil || *p.RecursionMissesPerSec != 2.5 || !p.Time.Equal(second.Time) {
		t.Errorf("point = %+v, want the fixture's delta of 25 misses over 10s", p)
	}

	for _, c := range []struct {
		target string
		code   int
		msg    string
	}{
		{"/v1/programs/99/history", 404, "no history for program 99"},
		{"/v1/programs/x/history", 400, "program id"},
		{"/v1/programs/0/history", 400, "program id"},
		{"/v1/programs/20/history?limit=1", 400, "unknown query parameter"},
		{"/v1/programs/20/history/x", 404, "no endpoint"},
	} {
		w := get(t, h, c.target)
		var e Error
		if w.Code != c.code || json.Unmarshal(w.Body.Bytes(), &e) != nil || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s: %d %s, want %d with an error saying %q", c.target, w.Code, w.Body, c.code, c.msg)
		}
	}

	bare := newTestServer(t, Options{}).Handler()
	if w := get(t, bare, "/v1/programs/20/history"); w.Code != 404 || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("history without a store: %d %s, want a JSON 404", w.Code, w.Body)
	}
	none := newTestServer(t, Options{Snapshot: func() *agent.Snapshot { return nil }, History: store.Series}).Handler()
	if w := get(t, none, "/v1/programs/20/history"); w.Code != 503 {
		t.Errorf("history before the first scan: %d, want 503", w.Code)
	}
}

// TestHistoryRealScan: the agent scans the real kernel around bursts of
// canary triggers, the store records each scan as the agent command does,
// and the API serves the canary's history: each point's misses are the
// kernel counter's growth over that interval, read by the test itself.
func TestHistoryRealScan(t *testing.T) {
	c, id := canarytest.Load(t)
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	store := history.New(history.Capacity(history.Window, time.Second))
	var latest atomic.Pointer[agent.Snapshot]
	scan := func() {
		t.Helper()
		s, err := a.Scan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		store.Record(s)
		latest.Store(s)
	}
	scan()

	srv := newTestServer(t, Options{Addr: "127.0.0.1:0", Snapshot: latest.Load, History: store.Series})
	addr, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- srv.Serve(sctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + addr.String()

	var want []uint64
	for _, n := range []int{7, 0, 31} {
		before, err := c.KernelMisses()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Trigger(n); err != nil {
			t.Fatal(err)
		}
		after, err := c.KernelMisses()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, after-before)
		scan()
	}
	var s history.Series
	fetchJSON(t, base+"/v1/programs/"+itoa(id)+"/history", &s)
	if len(s.Points) != len(want) {
		t.Fatalf("history of the canary has %d points, want %d: %+v", len(s.Points), len(want), s.Points)
	}
	for i, p := range s.Points {
		if p.RecursionMisses == nil || *p.RecursionMisses != want[i] || p.Runs < want[i] {
			t.Errorf("point %d: %v misses in %d runs, the kernel counted %d misses", i, p.RecursionMisses, p.Runs, want[i])
		}
	}
	total, _ := c.KernelMisses()
	if s.RecursionMissesTotal == nil || *s.RecursionMissesTotal != total || !s.HasRecursionMisses || s.MissKind == "" || s.UnloadedAt != nil {
		t.Errorf("series facts %+v, kernel total %d", s, total)
	}

	resp, err := http.Get(base + "/v1/programs/4294967295/history")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("history of an unknown id: %d, want 404", resp.StatusCode)
	}
}
