package otlp

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
)

// recorder is a real HTTP server's handler that keeps the bodies it got and
// answers as status says for each request (by its number, from 1).
type recorder struct {
	mu     sync.Mutex
	bodies []string
	answer func(n int, w http.ResponseWriter)
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, string(b))
	n := len(rc.bodies)
	rc.mu.Unlock()
	if r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("X-Token") != "t" || r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" {
		http.Error(w, "bad request line or headers", http.StatusBadRequest)
		return
	}
	if rc.answer != nil {
		rc.answer(n, w)
	}
}

func (rc *recorder) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.bodies...)
}

func testPoster(t *testing.T, srv *httptest.Server, tlsConf *tls.Config) *poster {
	t.Helper()
	return testPosterTimeout(t, srv, tlsConf, 2*time.Second)
}

func testPosterTimeout(t *testing.T, srv *httptest.Server, tlsConf *tls.Config, timeout time.Duration) *poster {
	t.Helper()
	u, err := url.Parse(srv.URL + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-protobuf")
	h.Set("X-Token", "t")
	p := newPoster(u, tlsConf, h, timeout)
	t.Cleanup(p.close)
	return p
}

func TestPosterAnswersReadAtNextSend(t *testing.T) {
	rc := &recorder{answer: func(n int, w http.ResponseWriter) {
		if n == 2 {
			http.Error(w, "no space left", http.StatusServiceUnavailable)
		}
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := testPoster(t, srv, nil)
	ctx := context.Background()
	var errs []error
	for _, b := range []string{"one", "two", "three"} {
		errs = append(errs, p.send(ctx, []byte(b), nil))
	}
	errs = append(errs, p.settle(nil))
	if got := rc.got(); strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("server got %q", got)
	}
	// The 503 to "two" is said when its answer is read: at the third send.
	if errs[0] != nil || errs[1] != nil || errs[3] != nil {
		t.Errorf("errors %v: want only the third send's", errs)
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "503") || !strings.Contains(errs[2].Error(), "no space left") {
		t.Errorf("third send: %v, want the 503 with its message", errs[2])
	}
}

// A backend that closes connections (Connection: close, an idle timeout
// shorter than the interval) and answers in chunks or at length: every
// request arrives and none fails.
func TestPosterReconnects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(n int, w http.ResponseWriter)
		idle   time.Duration
		pause  time.Duration
	}{
		{name: "connection close", answer: func(_ int, w http.ResponseWriter) { w.Header().Set("Connection", "close") }},
		{name: "idle timeout", idle: 30 * time.Millisecond, pause: 120 * time.Millisecond},
		{name: "chunked", answer: func(_ int, w http.ResponseWriter) {
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
			w.Write([]byte("more"))
		}},
		{name: "long answer", answer: func(_ int, w http.ResponseWriter) { w.Write(bytes.Repeat([]byte("x"), 200<<10)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &recorder{answer: tc.answer}
			srv := httptest.NewUnstartedServer(rc)
			srv.Config.IdleTimeout = tc.idle
			srv.Start()
			defer srv.Close()
			p := testPoster(t, srv, nil)
			for i, b := range []string{"a", "b", "c", "d"} {
				if err := p.send(context.Background(), []byte(b), nil); err != nil {
					t.Errorf("send %d: %v", i, err)
				}
				time.Sleep(tc.pause)
			}
			if err := p.settle(nil); err != nil {
				t.Error(err)
			}
			if got := rc.got(); strings.Join(got, "") != "abcd" {
				t.Errorf("server got %q", got)
			}
		})
	}
}

func TestPosterTLS(t *testing.T) {
	rc := &recorder{}
	srv := httptest.NewTLSServer(rc)
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	p := testPoster(t, srv, &tls.Config{RootCAs: pool})
	for _, b := range []string{"x", "y"} {
		if err := p.send(context.Background(), []byte(b), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.settle(nil); err != nil {
		t.Fatal(err)
	}
	if got := rc.got(); strings.Join(got, "") != "xy" {
		t.Errorf("server got %q", got)
	}
	// Without the server's CA the handshake fails, and says so.
	bad := testPoster(t, srv, nil)
	if err := bad.send(context.Background(), []byte("z"), nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted server: %v, want a certificate error", err)
	}
}

func TestUsePoster(t *testing.T) {
	o, err := config.ResolveOTel(config.MapEnv(map[string]string{"HTTPS_PROXY": "", "HTTP_PROXY": "http://proxy.invalid:3128", "NO_PROXY": "collector.local"}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"http://collector:4318/v1/metrics", false}, // through the proxy: net/http
		{"http://collector.local:4318/v1/metrics", true},
		{"https://collector:4318/v1/metrics", true},
		{"unix:///run/otel.sock", false},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := usePoster(u, o.Proxy.ProxyFunc()); got != tc.want {
			t.Errorf("usePoster(%s) = %v, want %v", tc.url, got, tc.want)
		}
	}
}

// OTEL_EXPORTER_OTLP_TIMEOUT=0 means no timeout (as net/http has it), not
// a deadline that has passed.
func TestPosterNoTimeout(t *testing.T) {
	rc := &recorder{answer: func(int, http.ResponseWriter) { time.Sleep(20 * time.Millisecond) }}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := testPosterTimeout(t, srv, nil, 0)
	for _, b := range []string{"a", "b"} {
		if err := p.send(context.Background(), []byte(b), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.settle(nil); err != nil {
		t.Fatal(err)
	}
	if got := rc.got(); strings.Join(got, "") != "ab" {
		t.Errorf("server got %q", got)
	}
}
