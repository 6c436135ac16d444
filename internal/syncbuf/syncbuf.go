// Package syncbuf is a buffer a child process writes (exec's copying
// goroutine) while a test reads it, as tests that run bpfleet, the agent or
// a backend need.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe to read with String while it is written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
