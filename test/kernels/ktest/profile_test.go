package ktest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/probes/profiler"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
)

// The agent's --profile path for real (issue 14): agent.New with a profile
// selector naming two socket filters whose runs are bpf_loop of 20 and
// 2,000 iterations. The first scan attaches the profilers; then each target
// is test-run 1,000 times; the second scan must report, for both and only
// them, 1,000 runs in total and in the interval (the kernel's own run_cnt,
// held on by this binary's stats fd, moved by the same 1,000), buckets that
// sum to the runs, p50 <= p90 <= p99 <= max, and the long target's p50
// above 4x the short one's. Where the kernel refuses tracing a BPF program
// the snapshot's one-line error is the skip reason, or the failure on
// entries measured to support it.
func TestAgentProfilesTimedTargets(t *testing.T) {
	const fires = 1000
	short, err := profiler.LoadTimedTarget(20)
	if err != nil {
		t.Skipf("timed target (bpf_loop): %v", err)
	}
	defer short.Close()
	long, err := profiler.LoadTimedTarget(2000)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	sid, lid := ProgramID(t, short.Prog), ProgramID(t, long.Prog)
	a, err := agent.New(agent.Config{Profile: []string{"id:" + strconv.Itoa(int(sid)), "id:" + strconv.Itoa(int(lid))}})
	if err != nil {
		t.Fatalf("starting the agent with --profile: %v", err)
	}
	defer a.Close()
	ctx := context.Background()
	if _, err := a.Scan(ctx); err != nil {
		t.Fatalf("first scan: %v", err)
	}
	before := map[uint32]uint64{sid: stats(t, short.Prog).RunCount, lid: stats(t, long.Prog).RunCount}
	if err := short.Trigger(fires); err != nil {
		t.Fatal(err)
	}
	if err := long.Trigger(fires); err != nil {
		t.Fatal(err)
	}
	kernel := map[uint32]uint64{sid: stats(t, short.Prog).RunCount - before[sid], lid: stats(t, long.Prog).RunCount - before[lid]}
	snap, err := a.Scan(ctx)
	if err != nil {
		t.Fatalf("second scan: %v", err)
	}
	got := map[uint32]*agent.ProfileStat{}
	for _, p := range snap.Programs {
		if p.Profile == nil {
			continue
		}
		if p.ID != sid && p.ID != lid {
			t.Errorf("program %d (%s) profiled but not selected", p.ID, p.Name)
			continue
		}
		got[p.ID] = p.Profile
	}
	for _, c := range []struct {
		name string
		id   uint32
	}{{"short", sid}, {"long", lid}} {
		ps := got[c.id]
		if ps == nil {
			t.Fatalf("%s target (program %d): no profile in the snapshot", c.name, c.id)
		}
		if ps.Error != "" {
			expect.SkipUnlessExpected(t, expect.FeatFentryOnBPF, errors.New("the agent reports: "+ps.Error))
		}
		if ps.Runs != fires || ps.IntervalRuns != fires {
			t.Errorf("%s: agent reports %d runs (%d in the interval), want %d", c.name, ps.Runs, ps.IntervalRuns, fires)
		}
		if statsOn && kernel[c.id] != fires {
			t.Errorf("%s: the kernel's run_cnt moved by %d over %d test runs", c.name, kernel[c.id], fires)
		}
		var sum uint64
		for _, n := range ps.Buckets {
			sum += n
		}
		if sum != ps.Runs {
			t.Errorf("%s: buckets sum to %d, runs %d", c.name, sum, ps.Runs)
		}
		if !(0 < ps.P50Ns && ps.P50Ns <= ps.P90Ns && ps.P90Ns <= ps.P99Ns && ps.P99Ns <= float64(ps.MaxNs)) {
			t.Errorf("%s: p50 %.0f p90 %.0f p99 %.0f max %d: want 0 < p50 <= p90 <= p99 <= max", c.name, ps.P50Ns, ps.P90Ns, ps.P99Ns, ps.MaxNs)
		}
		t.Logf("agent profile of %s (program %d, %s on %s): runs %d p50 %.0f p90 %.0f p99 %.0f max %d mean %.0f ns",
			c.name, c.id, ps.Shape, ps.Func, ps.Runs, ps.P50Ns, ps.P90Ns, ps.P99Ns, ps.MaxNs, ps.MeanNs)
		metric(t, "agent_profile."+c.name+".runs", ps.Runs)
	}
	if s, l := got[sid], got[lid]; !(l.P50Ns > 4*s.P50Ns) {
		t.Errorf("long target p50 %.0f ns not above 4x the short one's %.0f", l.P50Ns, s.P50Ns)
	}
}

// Windowed timing through the agent (--profile-window 100ms of 300ms): a
// target triggered in 20 bursts of 50 runs, 20 ms apart (longer than a
// period, so bursts fall both in and out of the windows): runs exact
// (1,000), some but not all of them timed, buckets summing to the timed.
func TestAgentProfilesWindowed(t *testing.T) {
	const bursts, per = 20, 50
	tt, err := profiler.LoadTimedTarget(20)
	if err != nil {
		t.Skipf("timed target (bpf_loop): %v", err)
	}
	defer tt.Close()
	id := ProgramID(t, tt.Prog)
	a, err := agent.New(agent.Config{Profile: []string{"id:" + strconv.Itoa(int(id))}, ProfileWindow: 100 * time.Millisecond, ProfilePeriod: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("starting the agent with --profile: %v", err)
	}
	defer a.Close()
	ctx := context.Background()
	if _, err := a.Scan(ctx); err != nil {
		t.Fatalf("first scan: %v", err)
	}
	start := time.Now()
	for range bursts {
		if err := tt.Trigger(per); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	span := time.Since(start)
	snap, err := a.Scan(ctx)
	if err != nil {
		t.Fatalf("second scan: %v", err)
	}
	var ps *agent.ProfileStat
	for _, p := range snap.Programs {
		if p.ID == id {
			ps = p.Profile
		}
	}
	if ps == nil {
		t.Fatalf("program %d: no profile in the snapshot", id)
	}
	if ps.Error != "" {
		expect.SkipUnlessExpected(t, expect.FeatFentryOnBPF, errors.New("the agent reports: "+ps.Error))
	}
	var sum uint64
	for _, n := range ps.Buckets {
		sum += n
	}
	t.Logf("windowed agent profile (%s, %s): runs %d, timed %d over %v; p50 %.0f ns", ps.Shape, ps.Timing, ps.Runs, ps.TimedRuns, span.Round(time.Millisecond), ps.P50Ns)
	if ps.Runs != bursts*per {
		t.Errorf("agent reports %d runs, want %d", ps.Runs, bursts*per)
	}
	if ps.TimedRuns == 0 || ps.TimedRuns >= ps.Runs || sum != ps.TimedRuns {
		t.Errorf("timed %d of %d runs (buckets sum %d): want some but not all timed over %v, buckets summing to the timed", ps.TimedRuns, ps.Runs, sum, span)
	}
}
