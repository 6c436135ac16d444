package ktest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/kernels/explain"
)

// The default watcher (no program named, as the DaemonSet and `bpfleet
// misses` without PROG run it) against known answers: recursion canaries,
// each trigger one miss of cause recursion in task context.

// canaries loads n recursion canaries, each missing only on its own
// trigger, and returns them with their program ids.
func canaries(t *testing.T, n int) ([]*canary.Canary, []uint32) {
	t.Helper()
	var cs []*canary.Canary
	var ids []uint32
	for range n {
		c, err := canary.Load()
		if err != nil {
			expect.SkipUnlessExpected(t, expect.CanaryFeature(err), err)
		}
		closeAll(t, c)
		id, err := c.ProgramID()
		if err != nil {
			t.Fatal(err)
		}
		cs, ids = append(cs, c), append(ids, id)
	}
	return cs, ids
}

// defaultWatcher starts an agent with the watcher on and nothing named,
// closing an episode after quiet scans, and takes its first scan.
func defaultWatcher(t *testing.T, quiet int) *agent.Agent {
	t.Helper()
	a, err := agent.New(agent.Config{WatchMisses: true, QuietIntervals: quiet})
	if err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	if w := explain.Scan(t, a).MissWatch; !w.Available {
		expect.SkipUnlessExpected(t, expect.FeatMissWatch, errors.New(w.Reason))
	}
	return a
}

func entry(t *testing.T, s *agent.Snapshot, id uint32) *agent.ProgramStat {
	t.Helper()
	for _, p := range s.Programs {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("program %d not in the scan", id)
	return nil
}

func slotOf(s *agent.Snapshot, id uint32) *agent.WatchedProgram {
	for i, w := range s.MissWatch.Watched {
		if w.ProgID == id {
			return &s.MissWatch.Watched[i]
		}
	}
	return nil
}

// TestWatchBursts: misses in bursts separated by quiet spells longer than
// an episode's close (the common shape, which the watcher used to miss
// entirely: it gave the slot back when the episode closed). The canary's
// first burst comes before the agent starts; every miss after it is
// explained as recursion, burst after burst.
func TestWatchBursts(t *testing.T) {
	const quiet, spell, bursts, size = 2, 5, 3, 5
	cs, ids := canaries(t, 1)
	c, id := cs[0], ids[0]
	if err := c.Trigger(1); err != nil { // the first burst, before the agent
		t.Fatal(err)
	}
	a := defaultWatcher(t, quiet)
	for b := range bursts {
		// A spell longer than an episode's close: quiet scans, the
		// program kept armed as having missed before.
		for q := range spell {
			s := explain.Scan(t, a)
			w := slotOf(s, id)
			if w == nil || (q >= quiet && w.Why != "missed-before") {
				t.Fatalf("burst %d, quiet scan %d: canary %d holds %+v, want it armed, missed-before once its episode closed: %+v", b, q, id, w, s.MissWatch)
			}
		}
		if err := c.Trigger(size); err != nil {
			t.Fatal(err)
		}
		s := explain.Scan(t, a)
		p := entry(t, s, id)
		t.Logf("burst %d: %d misses, causes %+v, watcher %+v", b, p.Delta.Misses, p.DeltaCauses, s.MissWatch)
		if p.Delta.Misses != size {
			t.Fatalf("burst %d: kernel counted %d misses, the canary makes %d", b, p.Delta.Misses, size)
		}
		if p.DeltaCauses.Recursion != size || p.DeltaCauses.Sum() != size {
			t.Errorf("burst %d after a quiet spell of %d scans (episodes close after %d): causes %+v, want all %d recursion", b, spell, quiet, p.DeltaCauses, size)
		}
		shown := 0
		for _, m := range s.Misses {
			if m.ProgID == id {
				shown++
				if m.Cause != agent.CauseRecursion || m.Context != agent.ContextTask {
					t.Errorf("burst %d: a miss shown as %s in %s, want recursion in task", b, m.Cause, m.Context)
				}
			}
		}
		if shown != size {
			t.Errorf("burst %d: %d misses shown with their cause, the interval counts %d explained", b, shown, size)
		}
	}
}

// TestWatchRotation: more programs miss than the CPU has debug registers
// (x86: 4, one per program per CPU). The watcher learns the limit, the
// rest wait, and the slots rotate: every program is explained in turn,
// and every interval's causes add up to the kernel's count.
func TestWatchRotation(t *testing.T) {
	const n, rounds = 6, 14
	cs, ids := canaries(t, n)
	a := defaultWatcher(t, 2)
	explained := map[uint32]uint64{}
	waited := false
	var slots int
	for r := range rounds {
		for _, c := range cs {
			if err := c.Trigger(1); err != nil {
				t.Fatal(err)
			}
		}
		s := explain.Scan(t, a)
		var line []string
		for _, id := range ids {
			p := entry(t, s, id)
			if p.Delta.Misses != 1 {
				t.Fatalf("round %d: kernel counted %d misses of canary %d, its trigger makes 1", r, p.Delta.Misses, id)
			}
			if p.DeltaCauses.Sum() != 1 || p.DeltaCauses.Recursion+p.DeltaCauses.Unexplained != 1 {
				t.Errorf("round %d: canary %d's causes %+v, want its one miss recursion or unexplained", r, id, p.DeltaCauses)
			}
			explained[id] += p.DeltaCauses.Recursion
			line = append(line, fmt.Sprintf("%d:%s", id, agent.ShortCauses(p.DeltaCauses)))
		}
		w := s.MissWatch
		if len(w.Waiting) > 0 {
			waited = true
		}
		slots = max(slots, w.Slots)
		var armed []uint32
		for _, p := range w.Watched {
			armed = append(armed, p.ProgID)
		}
		t.Logf("round %d: explained %v; armed %v, waiting %v, slots %d", r, line, armed, w.Waiting, w.Slots)
	}
	if slots == 0 || slots >= n {
		t.Skipf("the kernel armed all %d canaries without refusing a watchpoint (slots learned: %d): no rotation to see", n, slots)
	}
	if !waited {
		t.Errorf("no canary ever waited for a slot with %d missing and %d slots", n, slots)
	}
	for _, id := range ids {
		if explained[id] == 0 {
			t.Errorf("canary %d never explained in %d rounds (explained: %v)", id, rounds, explained)
		}
	}
}
