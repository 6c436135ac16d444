package ktest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/canary"
)

// ownersConfig is the agent's default configuration: owners found, by the
// task_file iterator where the kernel loads it (iter), else the /proc
// walk. A program attached through a perf_event fd without a link (every
// kprobe before Linux 5.15) gets its attach type from the owner walk.
func ownersConfig(iter bool) agent.Config {
	return agent.Config{StatsMode: agent.StatsAlways, Owners: true, OwnerIterator: iter}
}

// scanWith is scan with the agent configured by cfg.
func scanWith(t *testing.T, id uint32, cfg agent.Config) agent.ProgramStat {
	t.Helper()
	p, _ := scanSnapshot(t, id, cfg)
	return p
}

// scanSnapshot is scanWith that also returns the whole snapshot: its
// Degraded lines, its aggregates.
func scanSnapshot(t *testing.T, id uint32, cfg agent.Config) (agent.ProgramStat, *agent.Snapshot) {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("starting bpfleet's scanner: %v", err)
	}
	defer a.Close()
	snap, err := a.Scan(context.Background())
	if err != nil {
		t.Fatalf("bpfleet scan: %v", err)
	}
	for _, p := range snap.Programs {
		if p.ID == id {
			return *p, snap
		}
	}
	t.Fatalf("bpfleet's scan does not list program %d (%d programs seen)", id, len(snap.Programs))
	return agent.ProgramStat{}, nil
}

// checkScan holds bpfleet's scan of prog (called name in metric lines) against the kernel's own counters,
// read just before and after it (the sums of its attach type and owners
// too: checkAggregateMisses), and against the attach type the test
// attached. Without a bpf_prog iterator plugged in the agent cannot tell a
// sleepable tracing program from a plain one and must say so ("fentry?",
// sleepable unknown) rather than guess.
func checkScan(t *testing.T, name string, prog *ebpf.Program, wantAttach string) agent.ProgramStat {
	t.Helper()
	return checkScanWith(t, agent.Config{StatsMode: agent.StatsAlways}, name, prog, wantAttach)
}

// checkScanWith is checkScan with the agent configured by cfg.
func checkScanWith(t *testing.T, cfg agent.Config, name string, prog *ebpf.Program, wantAttach string) agent.ProgramStat {
	t.Helper()
	id := ProgramID(t, prog)
	before := stats(t, prog)
	p, snap := scanSnapshot(t, id, cfg)
	degraded := snap.Degraded
	after := stats(t, prog)
	// Where the kernel's bpf_prog_info has no recursion_misses, cilium/ebpf
	// reads it as 0 and bpfleet must report it absent, never 0, and say
	// why in a Degraded line (the start line's too); where it has them,
	// no such line.
	noField := canary.RecursionGuard()
	said := slices.IndexFunc(degraded, func(d string) bool { return strings.HasPrefix(d, agent.FeatureMisses+": ") })
	switch {
	case noField != nil && said < 0:
		t.Errorf("the kernel has no recursion_misses (%v), and bpfleet's Degraded lines do not say so: %q", noField, degraded)
	case noField == nil && said >= 0:
		t.Errorf("bpfleet says %q on a kernel that counts recursion misses", degraded[said])
	case said >= 0:
		t.Logf("bpfleet: %s", degraded[said])
	}
	switch {
	case p.RecursionMisses == nil && noField != nil:
		t.Logf("bpfleet reports recursion_misses absent for program %d, as the kernel has none: %v", id, noField)
	case p.RecursionMisses == nil:
		t.Errorf("bpfleet reports no recursion_misses for program %d; the kernel says %d", id, after.RecursionMisses)
	case noField != nil:
		t.Errorf("bpfleet reports recursion_misses %d for program %d, a number the kernel does not have (%v)", *p.RecursionMisses, id, noField)
	case *p.RecursionMisses < before.RecursionMisses || *p.RecursionMisses > after.RecursionMisses:
		t.Errorf("bpfleet reports %d recursion misses for program %d; the kernel says %d", *p.RecursionMisses, id, after.RecursionMisses)
	}
	checkAggregateMisses(t, snap, &p, noField)
	if statsOn && (p.RunCount < before.RunCount || p.RunCount > after.RunCount) {
		t.Errorf("bpfleet reports %d runs for program %d; the kernel says %d..%d", p.RunCount, id, before.RunCount, after.RunCount)
	}
	base := strings.TrimSuffix(wantAttach, ".s")
	switch {
	case p.AttachType == wantAttach:
	case p.Sleepable == nil && p.AttachType == base+"?":
		t.Logf("bpfleet: attach type %q for a %s program: sleepable unknown without a bpf_prog iterator", p.AttachType, wantAttach)
	default:
		sl := "unknown"
		if p.Sleepable != nil {
			sl = map[bool]string{true: "true", false: "false"}[*p.Sleepable]
		}
		t.Errorf("bpfleet classifies program %d as %q (sleepable %s), want %q", id, p.AttachType, sl, wantAttach)
	}
	t.Logf("bpfleet scan of %d: attach %q target %q runs %d misses %v", id, p.AttachType, p.AttachTarget, p.RunCount, deref(p.RecursionMisses))
	metric(t, name+".bpfleet_attach_type", p.AttachType)
	metric(t, name+".bpfleet_recursion_misses", deref(p.RecursionMisses))
	return p
}

// checkAggregateMisses holds the recursion_misses of the aggregates that
// sum p (its attach type's, each owner's) to what the kernel has: absent
// where it has no such counter (noField), as p's own, never a 0 it did
// not count; else known, and at least p's.
func checkAggregateMisses(t *testing.T, snap *agent.Snapshot, p *agent.ProgramStat, noField error) {
	t.Helper()
	check := func(what string, m *uint64) {
		switch {
		case m != nil && noField != nil:
			t.Errorf("bpfleet reports recursion_misses %d for %s, a number the kernel does not have (%v)", *m, what, noField)
		case m == nil && noField == nil:
			t.Errorf("bpfleet reports no recursion_misses for %s, which holds program %d (recursion_misses %v)", what, p.ID, deref(p.RecursionMisses))
		case m != nil && p.RecursionMisses != nil && *m < *p.RecursionMisses:
			t.Errorf("bpfleet reports recursion_misses %d for %s, fewer than its program %d's %d", *m, what, p.ID, *p.RecursionMisses)
		default:
			t.Logf("bpfleet: %s recursion_misses %v", what, deref(m))
		}
	}
	i := slices.IndexFunc(snap.AttachTypes, func(a agent.AttachTypeStat) bool { return a.AttachType == p.AttachType })
	if i < 0 {
		t.Errorf("bpfleet's attach types do not list %q, program %d's", p.AttachType, p.ID)
	} else {
		check("attach type "+p.AttachType, snap.AttachTypes[i].RecursionMisses)
	}
	owners := 0
	for _, o := range snap.Owners {
		if slices.Contains(o.ProgramIDs, p.ID) {
			owners++
			check("owner "+o.Key, o.RecursionMisses)
		}
	}
	if owners == 0 && len(p.Owners) > 0 {
		t.Errorf("bpfleet's owners do not list program %d, which has owners %+v", p.ID, p.Owners)
	}
}

func deref(p *uint64) any {
	if p == nil {
		return "absent"
	}
	return *p
}
