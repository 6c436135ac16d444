package api

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRouter throws arbitrary paths, ids and query strings at the whole
// handler (guards and mux). Whatever arrives, the answer is a 2xx or 4xx
// with a JSON or YAML body: never a 5xx, never a panic.
func FuzzRouter(f *testing.F) {
	for _, seed := range []string{
		"/v1/snapshot", "/v1/programs", "/v1/programs/20", "/v1/programs/0", "/v1/programs/4294967295",
		"/v1/programs/4294967296", "/v1/programs/-1", "/v1/programs/%00", "/v1/programs/20/", "/v1/programs//20",
		"/v1/programs?attach_type=tp_btf&sort=cpu&limit=1", "/v1/programs?missed=1&name=%ff%fe", "/v1/programs?limit=99999999999999999999",
		"/v1/programs?;", "/v1/programs?a=1&a=2", "/v1/programs?%", "/v1/attach-types?pretty", "/v1/episodes?open=true&prog_id=20",
		"/v1/episodes?prog_id=1e9", "/healthz", "/readyz?pretty=1", "/openapi.yaml", "/../../etc/passwd", "/v1/%2e%2e/snapshot",
		"//v1/snapshot", "/v1/programs/\u00e9", "*", "/v1/programs/20?sort=",
	} {
		f.Add("GET", seed)
	}
	f.Add("HEAD", "/v1/programs/30")
	f.Add("POST", "/v1/programs")
	f.Add("DELETE", "/v1/programs/20")
	h := newTestServer(f, Options{}).Handler()
	f.Fuzz(func(t *testing.T, method, target string) {
		// Build the request the way the server would parse it off the wire,
		// so only inputs net/http itself accepts reach the handler.
		raw := method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http answers 400 before any handler runs
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %q = %d: %s", method, target, w.Code, w.Body)
		}
		if w.Code < 200 {
			t.Fatalf("%s %q = %d", method, target, w.Code)
		}
		ct := w.Header().Get("Content-Type")
		if w.Code != 200 && ct != "application/json" {
			t.Fatalf("%s %q = %d with Content-Type %q", method, target, w.Code, ct)
		}
		if ct == "application/json" && req.Method != "HEAD" && !bytes.HasPrefix(w.Body.Bytes(), []byte("{")) {
			t.Fatalf("%s %q = %d: body is not a JSON object: %.80q", method, target, w.Code, w.Body)
		}
	})
}
