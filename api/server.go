// Package api is the agent's read-only HTTP API: the latest snapshot as
// JSON, filtered views of it, health and readiness, and its own OpenAPI
// document. It reads snapshots and nothing else: no endpoint changes kernel
// state, and only GET and HEAD without a body are accepted.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/internal/apiconst"
)

// DefaultAddr, TokenEnv and MinTokenLen: see internal/apiconst, which holds
// them for the CLI build (no net/http).
const (
	DefaultAddr = apiconst.DefaultAddr
	TokenEnv    = apiconst.TokenEnv
	MinTokenLen = apiconst.MinTokenLen
)

// Request limits. The API serves small GETs; anything larger is abuse or a
// mistake and is refused before a handler runs.
const (
	MaxHeaderBytes    = 8 << 10
	MaxURLBytes       = 4 << 10
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 60 * time.Second
)

//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI document (the file api/openapi.yaml).
func OpenAPI() []byte { return openAPIDoc }

// Options configure a Server.
type Options struct {
	// Addr is host:port to listen on. Default DefaultAddr.
	Addr string
	// Token is the bearer token clients must present. Required when Addr is
	// not a loopback address; when set it is required on every endpoint but
	// /healthz and /readyz (which the kubelet probes without credentials and
	// which reveal nothing but up/ready).
	Token string
	// Snapshot returns the latest snapshot, nil before the first scan.
	// Snapshots are never mutated after they are returned, so handlers read
	// them concurrently without locks.
	Snapshot func() *agent.Snapshot
	// History returns one program's recent history (agent/history), false
	// when it has none. Optional: without it the history route answers 404.
	History func(id uint32) (history.Series, bool)
	// Health reports the agent's liveness: nil is healthy. Optional.
	Health func() error
	// Ready is the agent's readiness beyond a recent snapshot (exports
	// that keep failing): nil is ready. Optional.
	Ready func() error
	// StaleAfter makes /readyz fail when the latest snapshot is older than
	// this (a wedged scan loop). 0 disables the check.
	StaleAfter time.Duration
	// Now is the clock for staleness; default time.Now.
	Now func() time.Time
}

// Server is the API server.
type Server struct {
	opts     Options
	tokenSum [32]byte
	handler  http.Handler
	srv      *http.Server
	ln       net.Listener
	// misses: the recent intervals' sampled misses (/v1/misses).
	misses missRing
}

// NewServer validates opts and builds the server. It refuses a non-loopback
// address without a token: an unauthenticated API on the node network would
// hand every program's identity and owners to anyone who can reach the node.
func NewServer(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Snapshot == nil {
		return nil, errors.New("api: no snapshot source given")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("api: address %q is not host:port: %w", opts.Addr, err)
	}
	if opts.Token != "" && len(opts.Token) < MinTokenLen {
		return nil, fmt.Errorf("api: bearer token is %d bytes, need at least %d", len(opts.Token), MinTokenLen)
	}
	if !IsLoopback(host) && opts.Token == "" {
		return nil, fmt.Errorf("api: refusing to listen on non-loopback %s without a bearer token: set --api-token-file or %s, or bind 127.0.0.1", opts.Addr, TokenEnv)
	}
	s := &Server{opts: opts}
	if opts.Token != "" {
		s.tokenSum = sha256.Sum256([]byte(opts.Token))
	}
	s.handler = s.guard(s.mux())
	s.srv = &http.Server{
		Addr:              opts.Addr,
		Handler:           s.handler,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
	}
	return s, nil
}

// IsLoopback is apiconst.IsLoopback.
func IsLoopback(host string) bool { return apiconst.IsLoopback(host) }

// Handler is the API with its guards (methods, bodies, sizes, auth), for
// embedding in another server or for tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Listen opens the listening socket, so a caller can learn the address
// (":0" in tests) before Serve.
func (s *Server) Listen() (net.Addr, error) {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("api: listening on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	return ln.Addr(), nil
}

// Addr is the address the server listens on: the bound one after Listen,
// else the configured one.
func (s *Server) Addr() net.Addr {
	if s.ln != nil {
		return s.ln.Addr()
	}
	addr, err := net.ResolveTCPAddr("tcp", s.opts.Addr)
	if err != nil {
		return &net.TCPAddr{}
	}
	return addr
}

// Serve serves until ctx is done, then shuts down gracefully (5s at most).
// It calls Listen first if the caller has not.
func (s *Server) Serve(ctx context.Context) error {
	if s.ln == nil {
		if _, err := s.Listen(); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serving: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("api: shutting down: %w", err)
		}
		return nil
	}
}

// guard refuses, before routing, whatever a read-only API must never act on.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		// Without a token, the loopback bind is the only protection: a
		// page in a browser on the node could reach it through DNS
		// rebinding (evil.example resolving to 127.0.0.1). Such a request
		// carries the attacker's name in Host, so only the names this
		// server is really reached by are answered.
		if s.opts.Token == "" && !s.hostAllowed(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, "host %q is not this API's address: use 127.0.0.1, localhost or the address it listens on", r.Host)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed: the API is read-only (GET, HEAD)", r.Method)
			return
		}
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			writeError(w, http.StatusRequestEntityTooLarge, "request bodies are not accepted")
			return
		}
		if len(r.RequestURI) > MaxURLBytes {
			writeError(w, http.StatusRequestURITooLong, "request URI is %d bytes, limit %d", len(r.RequestURI), MaxURLBytes)
			return
		}
		// ServeMux would redirect a non-canonical path (//x, /a/../b) to
		// its clean form; a read-only API has no business inviting clients
		// to follow redirects, so such paths are refused outright.
		if p := r.URL.Path; p == "" || p[0] != '/' || path.Clean(p) != p {
			writeError(w, http.StatusBadRequest, "path %q is not canonical", p)
			return
		}
		if s.opts.Token != "" && !unauthenticated(r.URL.Path) && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bpfleet"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host names this server: the
// bound address's host, localhost, or a loopback IP literal, with any port.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		if a, ok := s.Addr().(*net.TCPAddr); ok && a.IP.Equal(ip) {
			return true
		}
		return false
	}
	bound, _, err := net.SplitHostPort(s.opts.Addr)
	return err == nil && strings.EqualFold(bound, host)
}

// unauthenticated paths are the probes: the kubelet calls them without
// credentials, and they say only whether the agent is up and ready.
func unauthenticated(path string) bool {
	return path == "/healthz" || path == "/readyz"
}

// authorized compares the presented token with the configured one in
// constant time. Both sides are hashed first so that neither the content nor
// the length of the token leaks through timing.
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1
}
