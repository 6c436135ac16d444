package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

func u64(v uint64) *uint64 { return &v }
func bp(v bool) *bool      { return &v }

// fixture is a hand-built snapshot for the pure handler logic; the real
// kernel is served in kernel_test.go.
func fixture() *agent.Snapshot {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	return &agent.Snapshot{
		Seq: 7, Time: t0, Interval: 10 * time.Second,
		Kernel: agent.KernelInfo{Release: "6.18.0", Arch: "x86_64", CPUs: 2, Preempt: "PREEMPT_DYNAMIC"},
		Stats:  agent.StatsState{Enabled: true, HeldByAgent: true, Sysctl: 1},
		Programs: []*agent.ProgramStat{
			{Program: agent.Program{ID: 10, Name: "cil_from_netdev", Type: "sched_cls", AttachType: "tcx_ingress", RecursionMisses: u64(0),
				Owners: []agent.Owner{{PID: 100, Comm: "cilium-agent", PodName: "cilium-x1", PodNamespace: "kube-system"}}},
				Delta: agent.Rates{Runs: 1000, CPUShare: 0.01, NsPerRun: 100}},
			{Program: agent.Program{ID: 20, Name: "canary", Type: "tracing", AttachType: "tp_btf", AttachTarget: "bpf_trace_printk", RecursionMisses: u64(25), Sleepable: bp(false)},
				Delta: agent.Rates{Runs: 25, Misses: 25, CPUShare: 0.001, NsPerRun: 400}},
			{Program: agent.Program{ID: 30, Name: "kp_open", Type: "kprobe", AttachType: "kprobe",
				Links:  []agent.Link{{ID: 5, ProgID: 30, Type: "perf_event", Missed: u64(3)}},
				Owners: []agent.Owner{{PID: 200, Comm: "tetragon", PodName: "tetragon-a", PodNamespace: "security"}}},
				Delta: agent.Rates{Runs: 5000, CPUShare: 0.2, NsPerRun: 40}},
		},
		AttachTypes: []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: 1, RecursionMisses: u64(25)}},
		Episodes: []agent.Episode{
			{Source: agent.SourceRecursionMisses, ProgID: 20, Open: true, Misses: 25},
			{Source: agent.SourceLinkMissed, ProgID: 30, LinkID: 5, Open: false, Misses: 3, Reason: "quiet"},
		},
	}
}

func newTestServer(t testing.TB, o Options) *Server {
	t.Helper()
	if o.Snapshot == nil {
		snap := fixture()
		o.Snapshot = func() *agent.Snapshot { return snap }
	}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// localRequest is a request as a local client sends it (httptest's
// default Host, example.com, is refused by the DNS-rebinding guard).
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "127.0.0.1:9808"
	return r
}

func get(t *testing.T, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := localRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			r.Host = hdr[i+1]
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %T: %v", v, err)
	}
	return v
}

func TestProgramFilters(t *testing.T) {
	h := newTestServer(t, Options{}).Handler()
	cases := []struct {
		query string
		want  []uint32
	}{
		{"", []uint32{10, 20, 30}},
		{"?attach_type=tp_btf", []uint32{20}},
		{"?type=kprobe", []uint32{30}},
		{"?name=cil", []uint32{10}},
		{"?missed=true", []uint32{20, 30}}, // 30 through its link's missed
		{"?missed=false", []uint32{10}},
		{"?namespace=security", []uint32{30}},
		{"?pod=cilium-x1&namespace=kube-system", []uint32{10}},
		{"?pod=cilium-x1&namespace=security", nil},
		{"?sort=cpu", []uint32{30, 10, 20}},
		{"?sort=ns_per_run&limit=2", []uint32{20, 10}},
		{"?sort=misses&limit=1", []uint32{20}},
		{"?attach_type=fentry", nil},
	}
	for _, c := range cases {
		w := get(t, h, "/v1/programs"+c.query)
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", c.query, w.Code, w.Body)
		}
		l := decode[ProgramList](t, w)
		var got []uint32
		for _, p := range l.Programs {
			got = append(got, p.ID)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("/v1/programs%s = %v, want %v", c.query, got, c.want)
		}
		if l.Total != 3 || l.Seq != 7 {
			t.Errorf("%s: total %d seq %d, want 3 and 7", c.query, l.Total, l.Seq)
		}
	}
}

func TestBadRequests(t *testing.T) {
	h := newTestServer(t, Options{}).Handler()
	for _, target := range []string{
		"/v1/programs?sort=size", "/v1/programs?missed=maybe", "/v1/programs?limit=0", "/v1/programs?limit=-3",
		"/v1/programs?bogus=1", "/v1/programs?%zz", "/v1/programs/abc", "/v1/programs/0", "/v1/programs/4294967296",
		"/v1/programs/-1", "/v1/programs/1e3", "/v1/episodes?open=2", "/v1/episodes?prog_id=x", "/v1/episodes?source=kprobe",
		"/v1/maps?sort=size", "/v1/maps?prog_id=0", "/v1/maps?prog_id=x", "/v1/maps?limit=0", "/v1/maps?id=3",
		"/v1/snapshot?x=1", "/v1/snapshot/", "//v1/snapshot", "/v1/../v1/snapshot",
	} {
		w := get(t, h, target)
		if w.Code != http.StatusBadRequest {
			t.Errorf("GET %s = %d, want 400: %s", target, w.Code, w.Body)
			continue
		}
		if e := decode[Error](t, w); e.Error == "" {
			t.Errorf("GET %s: empty error message", target)
		}
	}
	for _, target := range []string{"/v1/programs/999", "/v1/nope", "/", "/v1/programs/10/x"} {
		if w := get(t, h, target); w.Code != http.StatusNotFound {
			t.Errorf("GET %s = %d, want 404", target, w.Code)
		}
	}
}

func TestProgramByID(t *testing.T) {
	h := newTestServer(t, Options{}).Handler()
	w := get(t, h, "/v1/programs/20")
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	p := decode[agent.ProgramStat](t, w)
	if p.ID != 20 || p.RecursionMisses == nil || *p.RecursionMisses != 25 || p.Delta.Misses != 25 {
		t.Errorf("program 20 came back as %+v", p)
	}
}

func TestEpisodesAndAttachTypes(t *testing.T) {
	h := newTestServer(t, Options{}).Handler()
	for q, want := range map[string]string{
		"":                              "[20 30]",
		"?open=true":                    "[20]",
		"?open=false":                   "[30]",
		"?prog_id=30":                   "[30]",
		"?source=link_missed":           "[30]",
		"?source=recursion_misses":      "[20]",
		"?open=true&source=link_missed": "[]",
	} {
		l := decode[EpisodeList](t, get(t, h, "/v1/episodes"+q))
		var ids []uint32
		for _, e := range l.Episodes {
			ids = append(ids, e.ProgID)
		}
		if got := fmt.Sprint(ids); got != want && !(want == "[]" && ids == nil) {
			t.Errorf("/v1/episodes%s = %s, want %s", q, got, want)
		}
	}
	a := decode[AttachTypeList](t, get(t, h, "/v1/attach-types"))
	if len(a.AttachTypes) != 1 || a.AttachTypes[0].AttachType != "tp_btf" || a.Kernel.Release != "6.18.0" || a.Calibration == nil {
		t.Errorf("attach types: %+v", a)
	}
}

func TestReadiness(t *testing.T) {
	var snap *agent.Snapshot
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := newTestServer(t, Options{
		Snapshot:   func() *agent.Snapshot { return snap },
		StaleAfter: time.Minute,
		Now:        func() time.Time { return now },
	})
	h := s.Handler()
	if w := get(t, h, "/readyz"); w.Code != 503 {
		t.Errorf("readyz before the first scan = %d, want 503", w.Code)
	}
	for _, p := range []string{"/v1/snapshot", "/v1/programs", "/v1/programs/1", "/v1/attach-types", "/v1/episodes"} {
		if w := get(t, h, p); w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("%s before the first scan = %d (Retry-After %q), want 503 with Retry-After", p, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if w := get(t, h, "/healthz"); w.Code != 200 {
		t.Errorf("healthz = %d, want 200 even before the first scan", w.Code)
	}
	snap = fixture()
	snap.Time = now.Add(-30 * time.Second)
	if w := get(t, h, "/readyz"); w.Code != 200 {
		t.Errorf("readyz with a fresh snapshot = %d, want 200", w.Code)
	}
	snap.Time = now.Add(-2 * time.Minute)
	w := get(t, h, "/readyz")
	if st := decode[Status](t, w); w.Code != 503 || !strings.Contains(st.Reason, "stuck") {
		t.Errorf("readyz with a stale snapshot = %d %+v, want 503 saying the loop is stuck", w.Code, st)
	}

	sick := newTestServer(t, Options{Health: func() error { return errors.New("stats fd lost") }})
	w = get(t, sick.Handler(), "/healthz")
	if st := decode[Status](t, w); w.Code != 503 || st.Reason != "stats fd lost" {
		t.Errorf("unhealthy healthz = %d %+v", w.Code, st)
	}

	// Ready's own rule (exports failing) after a fresh snapshot.
	snap.Time = now
	exporting := errors.New("the last 3 metric exports failed: 400")
	gated := newTestServer(t, Options{Snapshot: func() *agent.Snapshot { return snap }, Ready: func() error { return exporting }, Now: func() time.Time { return now }})
	w = get(t, gated.Handler(), "/readyz")
	if st := decode[Status](t, w); w.Code != 503 || st.Reason != exporting.Error() || st.Seq != snap.Seq {
		t.Errorf("readyz with failing exports = %d %+v", w.Code, st)
	}
	exporting = nil
	if w := get(t, gated.Handler(), "/readyz"); w.Code != 200 {
		t.Errorf("readyz once exports succeed = %d", w.Code)
	}
}

func TestMethodsAndBodies(t *testing.T) {
	h := newTestServer(t, Options{}).Handler()
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "BREW"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest(m, "/v1/snapshot", nil))
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s = %d Allow=%q, want 405 with Allow: GET, HEAD", m, w.Code, w.Header().Get("Allow"))
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, localRequest("GET", "/v1/snapshot", strings.NewReader("{}")))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("GET with a body = %d, want 413", w.Code)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, localRequest("HEAD", "/v1/snapshot", nil))
	if w.Code != 200 || w.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD = %d, Content-Length %q", w.Code, w.Header().Get("Content-Length"))
	}
	if w := get(t, h, "/v1/programs?name="+strings.Repeat("a", MaxURLBytes)); w.Code != http.StatusRequestURITooLong {
		t.Errorf("oversized URI = %d, want 414", w.Code)
	}
}

func TestBindRequiresToken(t *testing.T) {
	src := func() *agent.Snapshot { return nil }
	for _, addr := range []string{"0.0.0.0:9808", ":9808", "[::]:9808", "10.1.2.3:9808", "node.example:9808"} {
		_, err := NewServer(Options{Addr: addr, Snapshot: src})
		if err == nil || !strings.Contains(err.Error(), "without a bearer token") {
			t.Errorf("NewServer(%s) without token: err = %v, want refusal", addr, err)
		}
		if _, err := NewServer(Options{Addr: addr, Snapshot: src, Token: strings.Repeat("k", MinTokenLen)}); err != nil {
			t.Errorf("NewServer(%s) with token: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9808", "localhost:0", "[::1]:9808", "127.0.0.2:1"} {
		if _, err := NewServer(Options{Addr: addr, Snapshot: src}); err != nil {
			t.Errorf("NewServer(%s) loopback without token: %v", addr, err)
		}
	}
	if _, err := NewServer(Options{Addr: "0.0.0.0:1", Snapshot: src, Token: "short"}); err == nil {
		t.Error("a 5-byte token was accepted")
	}
	if _, err := NewServer(Options{Addr: "nohostport", Snapshot: src}); err == nil {
		t.Error("an address without a port was accepted")
	}
}

// TestTokenOverTCP serves on a real socket (loopback only, as the tests
// must) with a token, the way a non-loopback bind is served.
func TestTokenOverTCP(t *testing.T) {
	const tok = "correct-horse-battery-staple"
	s := newTestServer(t, Options{Addr: "127.0.0.1:0", Token: tok})
	addr, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + addr.String()
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/v1/snapshot", "", 401},
		{"/v1/snapshot", "Bearer wrong-token-of-some-length", 401},
		{"/v1/snapshot", "Bearer " + tok[:len(tok)-1], 401},
		{"/v1/snapshot", "Bearer " + tok + "x", 401},
		{"/v1/snapshot", "Basic " + tok, 401},
		{"/v1/snapshot", tok, 401},
		{"/v1/programs/20", "Bearer " + tok, 200},
		{"/v1/snapshot", "bearer " + tok, 200},
		{"/openapi.yaml", "", 401},
		{"/healthz", "", 200},
		{"/readyz", "", 200},
	} {
		req, _ := http.NewRequest("GET", base+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s with %q = %d, want %d", c.path, c.auth, resp.StatusCode, c.want)
		}
		if c.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("401 without WWW-Authenticate")
		}
	}

	// The client used by `bpfleet top --remote`.
	if _, err := FetchSnapshot(ctx, base, ""); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("FetchSnapshot without token: %v, want a 401 error", err)
	}
	snap, err := FetchSnapshot(ctx, base+"/", tok)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Seq != 7 || len(snap.Programs) != 3 {
		t.Errorf("FetchSnapshot got seq %d with %d programs, want 7 and 3", snap.Seq, len(snap.Programs))
	}
	if _, err := FetchSnapshot(ctx, "ftp://"+addr.String(), tok); err == nil {
		t.Error("FetchSnapshot accepted ftp://")
	}

	// Oversized headers are refused by net/http itself (431), never reach a handler.
	conn, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("b", 2*MaxHeaderBytes+4096))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	line := make([]byte, 12)
	if _, err := io.ReadFull(conn, line); err != nil || !strings.HasPrefix(string(line), "HTTP/1.1 431") {
		t.Errorf("oversized header answered %q, %v; want HTTP/1.1 431", line, err)
	}
}

func fetchJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %s: %s", url, resp.Status, b)
	}
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("GET %s: decoding %T: %v", url, v, err)
	}
}

func itoa(id uint32) string { return fmt.Sprint(id) }

func hasProgram(ps []agent.ProgramStat, id uint32) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
}

// TestHostHeader: without a token the API answers only requests whose Host
// names it (the bound address, localhost or a loopback literal), so a page
// that rebinds its own name to 127.0.0.1 cannot read it; with a token the
// token is the guard and any Host is served.
func TestHostHeader(t *testing.T) {
	for _, withToken := range []bool{false, true} {
		opts := Options{Addr: "127.0.0.1:0"}
		if withToken {
			opts.Token = "correct-horse-battery-staple"
		}
		s := newTestServer(t, opts)
		addr, err := s.Listen()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- s.Serve(ctx) }()
		_, port, _ := net.SplitHostPort(addr.String())
		for _, c := range []struct {
			host string
			want int
		}{
			{addr.String(), 200},
			{"127.0.0.1", 200},
			{"localhost:" + port, 200},
			{"LOCALHOST", 200},
			{"127.0.0.2:" + port, 200},
			{"[::1]:" + port, 200},
			{"evil.example", 421},
			{"evil.example:" + port, 421},
			{"localhost.evil.example", 421},
			{"10.0.0.7:" + port, 421},
			{"127.0.0.1.nip.io", 421},
		} {
			req, _ := http.NewRequest("GET", "http://"+addr.String()+"/v1/snapshot", nil)
			req.Host = c.host
			if withToken {
				req.Header.Set("Authorization", "Bearer "+opts.Token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := c.want
			if withToken {
				want = 200
			}
			if resp.StatusCode != want {
				t.Errorf("token %v, Host %q: status %d, want %d: %s", withToken, c.host, resp.StatusCode, want, body)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
