// Package steady runs a no-op BPF program at a known steady rate, for the
// tests of run counts (sampled stats, holders of stats coming and going):
// a socket filter test-run (BPF_PROG_TEST_RUN) in batches that catch up
// every millisecond, so the rate holds on a busy machine, and a count of
// the runs made to compare the agent's figures with.
package steady

import (
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Program is the steady program and its count of runs made.
type Program struct {
	Prog *ebpf.Program
	// ID is the program's kernel id.
	ID uint32

	mu    sync.Mutex // held by each batch: Paused reads a count no batch is adding to
	fired uint64
	stop  chan struct{}
	wg    sync.WaitGroup
}

// Start loads a program named name and runs it rate times a second until
// the test ends.
func Start(t testing.TB, name string, rate float64) *Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatalf("loading the steady program: %v", err)
	}
	info, err := p.Info()
	if err != nil {
		p.Close()
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		p.Close()
		t.Fatal("the kernel gives no program id")
	}
	s := &Program{Prog: p, ID: uint32(id), stop: make(chan struct{})}
	s.wg.Add(1)
	go s.run(t, rate)
	t.Cleanup(func() { close(s.stop); s.wg.Wait(); p.Close() })
	return s
}

func (s *Program) run(t testing.TB, rate float64) {
	defer s.wg.Done()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	data := make([]byte, 14)
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		s.mu.Lock()
		if want := uint64(time.Since(start).Seconds() * rate); want > s.fired {
			n := want - s.fired
			if _, err := s.Prog.Run(&ebpf.RunOptions{Data: data, Repeat: uint32(n)}); err != nil {
				s.mu.Unlock()
				t.Errorf("test-running the steady program: %v", err)
				return
			}
			s.fired += n
		}
		s.mu.Unlock()
	}
}

// Fired is the runs made so far (a batch may be adding to it).
func (s *Program) Fired() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fired
}

// Paused runs f with no batch in flight and returns the runs made before
// it: across a scan in f, exactly the runs the kernel could have counted.
func (s *Program) Paused(f func()) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	return s.fired
}
