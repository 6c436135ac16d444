package exporter

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
)

// TestWireSettingsFromConfig: the OTLP/HTTP metric settings reach the wire
// from the variables through internal/config alone (the exporter reads no
// environment): the signal's endpoint, headers (URL-decoded), compression
// none, and the timeout, which bounds a backend that does not answer.
func TestWireSettingsFromConfig(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		n := len(got)
		mu.Unlock()
		if r.URL.Path != "/otlp/v1/metrics" {
			http.Error(w, "path "+r.URL.Path, http.StatusNotFound)
			return
		}
		if n > 1 {
			<-hang
		}
	}))
	defer srv.Close()
	defer close(hang)
	o, err := config.ResolveOTel(config.MapEnv(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":            "http://127.0.0.1:1", // the signal's variable wins
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":    srv.URL + "/otlp/v1/metrics",
		"OTEL_EXPORTER_OTLP_HEADERS":             "X-Tenant=generic",
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS":     "X-Tenant=a%2Cb,X-Token=t",
		"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "none",
		"OTEL_EXPORTER_OTLP_TIMEOUT":             "300",
		"OTEL_TRACES_EXPORTER":                   "none",
	}), "", "")
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(context.Background(), Config{Level: LevelAttachType, Interval: time.Hour, OTel: o})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = e.Shutdown(ctx)
	}()
	e.Update(context.Background(), snapshot(1, prog(1, 10, nil)))
	if err := e.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(got) != 1 {
		t.Fatalf("%d requests, want 1", len(got))
	}
	h := got[0]
	mu.Unlock()
	if h.Get("X-Tenant") != "a,b" || h.Get("X-Token") != "t" || h.Get("Content-Encoding") != "" {
		t.Errorf("headers %v: want X-Tenant a,b, X-Token t and no Content-Encoding", h)
	}

	// The second export hangs: OTEL_EXPORTER_OTLP_TIMEOUT's 300 ms ends it.
	start := time.Now()
	err = e.ForceFlush(context.Background())
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Errorf("export to a hanging backend: %v after %v, want an error within the 300 ms timeout", err, took)
	}
}
