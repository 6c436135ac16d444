// Package registry serves an OCI distribution registry on loopback for
// tests: go-containerregistry's pkg/registry, blobs in memory, plain HTTP on
// 127.0.0.1 and a free port. Images reach a test's containerd through it as
// they reach users' nodes: pushed (ociimage.Push) and pulled.
package registry

import (
	"io"
	"log"
	"net/http/httptest"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Start serves an empty registry and returns its address ("127.0.0.1:port",
// the host part of image references in it: 127.0.0.1:port/name:tag) and a
// func that stops it. Its request log is discarded; only errors reach the
// client. Like httptest.NewServer, it panics if no loopback port is free.
func Start() (addr string, stop func()) {
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	return s.Listener.Addr().String(), s.Close
}
