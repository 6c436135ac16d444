// Package steady runs a BPF program at a known steady rate, for the tests
// of run counts (sampled stats, holders of stats coming and going): a
// socket filter test-run (BPF_PROG_TEST_RUN) in batches that catch up
// every millisecond, so the rate holds on a busy machine. The program
// counts its own runs in a map, the truth to compare the agent's figures
// with: a test run interrupted by a signal is run again whole (cilium/ebpf
// retries on EINTR), so the runs asked for are not the runs made.
package steady

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Program is the steady program and its count of runs made.
type Program struct {
	Prog *ebpf.Program
	// ID is the program's kernel id.
	ID uint32

	runs *ebpf.Map  // one u64: the program's own count of its runs
	mu   sync.Mutex // held by each batch: Paused reads a count no batch is adding to
	sent uint64     // runs asked for: the pace
	stop chan struct{}
	wg   sync.WaitGroup
}

// Start loads a program named name and runs it rate times a second until
// the test ends.
func Start(t testing.TB, name string, rate float64) *Program {
	t.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "steady_runs", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatalf("creating the steady program's count: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{
			// runs[0] += 1
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		},
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
	s := &Program{Prog: p, ID: uint32(id), runs: m, stop: make(chan struct{})}
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
		if want := uint64(time.Since(start).Seconds() * rate); want > s.sent {
			n := want - s.sent
			if _, err := s.Prog.Run(&ebpf.RunOptions{Data: data, Repeat: uint32(n)}); err != nil {
				s.mu.Unlock()
				t.Errorf("test-running the steady program: %v", err)
				return
			}
			s.sent += n
		}
		s.mu.Unlock()
	}
}

// Fired is the runs made so far, as the program counted them.
func (s *Program) Fired() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count()
}

// Paused runs f with no batch in flight and returns the runs made before
// it: across a scan in f, exactly the runs the kernel could have counted.
func (s *Program) Paused(f func()) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	return s.count()
}

func (s *Program) count() uint64 {
	var n uint64
	if err := s.runs.Lookup(uint32(0), &n); err != nil {
		panic("reading the steady program's count: " + err.Error())
	}
	return n
}

// HolderComesAndGoes calls scan every 300 ms for 9 s while another holder
// of BPF stats (the test itself, holding a BPF_ENABLE_STATS fd as a local
// bpfleet top or bpftool prog profile would) appears between two calls
// after 3 s and leaves between two calls after 6 s; held says whether it
// held stats at that call. Calls every 300 ms fall at every phase of a 1 s
// sampling period.
func HolderComesAndGoes(t testing.TB, scan func(held bool)) {
	t.Helper()
	var holder io.Closer
	defer func() {
		if holder != nil {
			holder.Close()
		}
	}()
	start := time.Now()
	for time.Since(start) < 9*time.Second {
		time.Sleep(150 * time.Millisecond)
		switch el := time.Since(start); {
		case holder == nil && el > 3*time.Second && el < 6*time.Second:
			fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				t.Fatalf("BPF_ENABLE_STATS: %v", err)
			}
			holder = fd
		case holder != nil && el > 6*time.Second:
			holder.Close()
			holder = nil
		}
		time.Sleep(150 * time.Millisecond)
		scan(holder != nil)
	}
}
