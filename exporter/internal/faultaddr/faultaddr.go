// Package faultaddr makes the backends the exporter's tests fail against:
// one that accepts connections and never answers, and an address nothing
// listens on. Test-only: imported by exporter's and exporter/otlp's tests.
package faultaddr

import (
	"net"
	"sync"
	"testing"
)

// Stuck accepts connections and never answers: a collector that is
// up but hangs.
func Stuck(t *testing.T) (addr string, closeAll func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String(), func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
}

// Dead is a loopback address nothing listens on.
func Dead(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}
