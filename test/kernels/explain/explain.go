// Package explain holds the kernel matrix's check of explained misses:
// an agent with the miss watcher armed on one program, a scenario
// triggered, and every miss the kernel counted in the interval explained
// with the cause the scenario provoked. Only tests import it.
package explain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/probes/misswatch"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// Misses runs trigger between two scans of an agent that watches program
// id, and checks that the interval's n misses are all explained as cause in
// context (context "" accepts any), that the causes add up to the kernel's
// counter, and that each sample's stack ends at the miss counter.
func Misses(t *testing.T, id uint32, n uint64, cause, context string, trigger func()) {
	t.Helper()
	snap, p := Observe(t, id, trigger)
	if p.Delta.Misses != n {
		t.Fatalf("kernel counted %d misses, the scenario makes %d", p.Delta.Misses, n)
	}
	if sampled(snap, id) == 0 && n > 0 && cause == agent.CauseNested && !expect.Expected(expect.FeatMissWatchKprobe) {
		// arm64 takes a kprobe as a debug exception (BRK), and a
		// watchpoint does not fire inside a debug exception handler.
		expect.SkipUnlessExpected(t, expect.FeatMissWatchKprobe, fmt.Errorf("the watchpoint sampled none of %d misses counted in a kprobe handler", n))
	}
	if got := p.DeltaCauses.Get(cause); got != n || p.DeltaCauses.Sum() != n {
		t.Errorf("causes %+v: want all %d misses %s", p.DeltaCauses, n, cause)
	}
	for _, s := range snap.Misses {
		if s.ProgID == id && context != "" && s.Context != context {
			t.Errorf("a miss in %s context, the scenario makes them in %s", s.Context, context)
		}
	}
}

// Observe runs trigger between two scans of an agent that watches program
// id and returns the second scan and its entry of the program, having
// checked what holds for any scenario: the cumulative causes add up to the
// kernel's recursion_misses, and each sampled stack starts at the counter.
func Observe(t *testing.T, id uint32, trigger func()) (*agent.Snapshot, *agent.ProgramStat) {
	t.Helper()
	a, snap := Watching(t, id)
	defer a.Close()
	if !watched(snap, id) {
		t.Fatalf("program %d not watched after the first scan: %+v", id, snap.MissWatch)
	}
	trigger()
	snap = Scan(t, a)
	var p *agent.ProgramStat
	for _, q := range snap.Programs {
		if q.ID == id {
			p = q
		}
	}
	if p == nil {
		t.Fatalf("program %d not in the scan", id)
	}
	t.Logf("program %d: misses %d, causes %+v, watcher %+v", id, p.Delta.Misses, p.DeltaCauses, snap.MissWatch)
	for _, s := range snap.Misses {
		t.Logf("miss on CPU %d (%s, %s) by %s[%d]:\n\t%s", s.CPU, s.Cause, s.Context, s.Comm, s.TID, strings.Join(s.Stack, "\n\t"))
	}
	if p.DeltaCauses.Sum() != p.Delta.Misses {
		t.Errorf("causes %+v do not add up to the interval's %d misses", p.DeltaCauses, p.Delta.Misses)
	}
	if c := agent.ProgramCauses(p); p.RecursionMisses == nil || c.Sum() != *p.RecursionMisses || p.MissCauses != nil && *p.MissCauses != c {
		t.Errorf("cumulative causes %v do not add up to recursion_misses %v", p.MissCauses, p.RecursionMisses)
	}
	for _, s := range snap.Misses {
		if s.ProgID != id {
			continue
		}
		// Where kallsyms hides addresses the frames are bare addresses.
		named := snap.MissWatch.Symbols == misswatch.SymbolsKallsyms
		if len(s.Stack) == 0 || named && !strings.HasPrefix(s.Stack[0], "bpf_prog_inc_misses_counter") {
			t.Errorf("a sampled stack does not start at the miss counter: %q", s.Stack)
		}
	}
	return snap, p
}

func sampled(s *agent.Snapshot, id uint32) int {
	n := 0
	for _, m := range s.Misses {
		if m.ProgID == id {
			n++
		}
	}
	return n
}

// Scan is one scan of a, failing the test on an error.
func Scan(t *testing.T, a *agent.Agent) *agent.Snapshot {
	t.Helper()
	snap, err := a.Scan(context.Background())
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return snap
}

func watched(s *agent.Snapshot, id uint32) bool {
	for _, w := range s.MissWatch.Watched {
		if w.ProgID == id {
			return true
		}
	}
	return false
}

// Blind runs trigger in two intervals of an agent that watches program id
// (the agent gives up on a program after two intervals and 6 misses with
// no sample) and checks the watcher's verdict: where the kernel's
// watchpoints fire for the program's misses (sampleable) it stays watched
// and is never blind; where they do not, it is listed as blind with every
// miss of the two intervals and no longer watched, its slot free.
func Blind(t *testing.T, id uint32, sampleable bool, trigger func()) {
	t.Helper()
	a, snap := Watching(t, id)
	defer a.Close()
	var misses uint64
	samples := 0
	for range 2 {
		trigger()
		snap = Scan(t, a)
		samples += sampled(snap, id)
		for _, p := range snap.Programs {
			if p.ID == id {
				misses += p.Delta.Misses
			}
		}
	}
	var blind *agent.BlindProgram
	for i, b := range snap.MissWatch.Blind {
		if b.ProgID == id {
			blind = &snap.MissWatch.Blind[i]
		}
	}
	t.Logf("program %d: %d misses, %d sampled in two intervals; blind %+v; watched %v", id, misses, samples, blind, watched(snap, id))
	switch {
	case sampleable && blind != nil:
		t.Errorf("program %d called blind, yet the kernel's watchpoints fire for its misses (%d sampled of %d)", id, samples, misses)
	case sampleable && !watched(snap, id):
		t.Errorf("program %d no longer watched: %+v", id, snap.MissWatch)
	case !sampleable && blind == nil:
		t.Errorf("program %d not blind after %d misses with %d samples: %+v", id, misses, samples, snap.MissWatch)
	case !sampleable && watched(snap, id):
		t.Errorf("blind program %d still holds its watchpoints", id)
	case !sampleable && blind.Misses != misses:
		t.Errorf("blind program %d counted %d misses, the kernel %d", id, blind.Misses, misses)
	}
}

// Watching starts an agent that watches program id and returns it with its
// first scan; a kernel that refuses the watcher skips the test, unless the
// matrix entry expects watchpoints.
func Watching(t *testing.T, id uint32) (*agent.Agent, *agent.Snapshot) {
	t.Helper()
	a, err := agent.New(agent.Config{WatchMisses: true, WatchPrograms: []uint32{id}})
	if err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	snap, err := a.Scan(context.Background())
	if err != nil {
		a.Close()
		t.Fatalf("scan: %v", err)
	}
	if w := snap.MissWatch; !w.Available {
		a.Close()
		expect.SkipUnlessExpected(t, expect.FeatMissWatch, errors.New(w.Reason))
	}
	return a, snap
}
