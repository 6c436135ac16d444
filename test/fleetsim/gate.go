package fleetsim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

// gate is a pool's way to the backend: it forwards the pool's OTLP
// requests (to the mirror too, if any), counts them (requests, bytes as
// sent and uncompressed) and, when cut, resets every connection as a
// network partition would.
type gate struct {
	url                       string
	srv                       *http.Server
	cut                       atomic.Bool
	cutAt                     atomic.Int64
	requests, bytes, rawBytes atomic.Int64
}

func startGate(endpoint, mirror string) (*gate, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("fleetsim: endpoint %q: %w", endpoint, err)
	}
	if _, err := url.Parse(mirror); err != nil {
		return nil, fmt.Errorf("fleetsim: mirror %q: %w", mirror, err)
	}
	base := u.Path
	u.Path = ""
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = nil
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fleetsim: gate: %w", err)
	}
	g := &gate{url: "http://" + l.Addr().String() + base}
	g.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.cut.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					if tc, ok := c.(*net.TCPConn); ok {
						tc.SetLinger(0) // a reset, not a clean close
					}
					c.Close()
					return
				}
			}
			http.Error(w, "cut off", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.requests.Add(1)
		g.bytes.Add(int64(len(body)))
		raw := int64(len(body))
		if r.Header.Get("Content-Encoding") == "gzip" {
			if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
				raw, _ = io.Copy(io.Discard, zr)
			}
		}
		g.rawBytes.Add(raw)
		if mirror != "" {
			// The mirror first: what it refused fails the export, which
			// the agent counts (NodeTruth.ExportErrors).
			if code, err := forward(r, mirror+strings.TrimPrefix(r.URL.Path, base), body); err != nil {
				http.Error(w, err.Error(), code)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})}
	go g.srv.Serve(l)
	return g, nil
}

func (g *gate) close() { g.srv.Close() }

// forward posts r's body to u with r's content headers: the status to
// answer and an error where u did not take it.
func forward(r *http.Request, u string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u, bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway, err
	}
	for _, h := range []string{"Content-Type", "Content-Encoding"} {
		req.Header.Set(h, r.Header.Get(h))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return http.StatusBadGateway, fmt.Errorf("mirror: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("mirror %s: %s: %s", u, resp.Status, msg)
	}
	return 0, nil
}
