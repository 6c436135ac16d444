//go:build !lean

package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strconv"
	"time"
)

// servePprof serves Go's runtime profiles (net/http/pprof) on addr, the
// agent's --pprof (loopback only: internal/config checks it; `make bench
// BENCH=agentcpu` takes a CPU profile of the running agent through it), on
// its own mux (never http.DefaultServeMux, so nothing else can expose them
// by accident). It runs until the process exits.
func servePprof(addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", profileHz)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving Go runtime profiles", "addr", ln.Addr().String())
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// profileHz is pprof.Profile with an optional sampling rate (?hz=N, at most
// 10000): an agent that runs 0.1% of a core gives 100 Hz too few samples
// to say where its CPU goes. The runtime keeps the first rate set and
// records it in the profile (Go says once on stderr that the profile's
// own request for 100 Hz came too late).
func profileHz(w http.ResponseWriter, r *http.Request) {
	if hz, err := strconv.Atoi(r.URL.Query().Get("hz")); err == nil && hz > 0 && hz <= 10000 {
		runtime.SetCPUProfileRate(hz)
	}
	pprof.Profile(w, r)
}
