package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
)

func TestMissesTable(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 1, 0, time.UTC)
	stack := []string{"bpf_prog_inc_misses_counter+0x10", "__bpf_prog_enter_recur+0x2a", "htab_map_delete_elem+0x5"}
	m := agent.MissSample{Time: t0, ProgID: 42, ProgName: "canary", CPU: 1, Context: agent.ContextTask, Cause: agent.CauseRecursion,
		PID: 77, TID: 77, Comm: "loader", PodName: "web-1", PodNamespace: "shop", Stack: stack}
	m2 := m
	m2.CPU = 3
	other := m
	other.Cause, other.Context, other.Stack = agent.CauseInterrupt, agent.ContextSoftirq, []string{"bpf_prog_inc_misses_counter+0x10", "net_rx_action+0x1"}
	var out bytes.Buffer
	if err := printMisses(&out, "table", missBatch{misses: []agent.MissSample{m, m2, other}}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// Two groups: the two recursion misses of one second on CPUs 1 and 3
	// share their stack and show it once.
	if strings.Count(got, "htab_map_delete_elem+0x5") != 1 || strings.Count(got, "net_rx_action+0x1") != 1 {
		t.Errorf("want each stack once:\n%s", got)
	}
	for _, want := range []string{"TIME", "CONTEXT", "CAUSE", "1,3", "recursion", "canary #42", "loader[77]", "shop/web-1", "softirq", "interrupt", "\n    __bpf_prog_enter_recur+0x2a\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	lines := strings.Split(got, "\n")
	if !strings.HasSuffix(strings.TrimSpace(lines[1]), " 2") {
		t.Errorf("first group %q: want its count 2 last", lines[1])
	}

	out.Reset()
	if err := printMisses(&out, "jsonl", missBatch{misses: []agent.MissSample{m, other}}); err != nil {
		t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(ls) != 2 {
		t.Fatalf("jsonl: %d lines, want one per miss (2)", len(ls))
	}
	var back agent.MissSample
	if err := json.Unmarshal([]byte(ls[1]), &back); err != nil || back.Cause != agent.CauseInterrupt || len(back.Stack) != 2 {
		t.Errorf("jsonl line %q: %+v, %v", ls[1], back, err)
	}
}

// Without the watcher the first line says why, and each interval's misses
// per program are printed from the counters, as unexplained.
func TestMissesWithoutWatcher(t *testing.T) {
	n := uint64(12)
	snap := &agent.Snapshot{Time: time.Unix(100, 0), Programs: []*agent.ProgramStat{
		{Program: agent.Program{ID: 42, Name: "canary", RecursionMisses: &n}, Delta: agent.Rates{Misses: 5}},
		{Program: agent.Program{ID: 43, Name: "quiet", RecursionMisses: &n}},
	}}
	calls := 0
	src := func(context.Context) (missBatch, error) {
		calls++
		return missBatch{watch: agent.MissWatch{Reason: "perf_event_open: EACCES (needs CAP_PERFMON)"}, snap: snap}, nil
	}
	var out bytes.Buffer
	if err := runMisses(context.Background(), src, "table", &out, time.Millisecond, 1, true); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if calls != 2 {
		t.Errorf("%d scans, want 2 (a baseline, one interval)", calls)
	}
	if first, _, _ := strings.Cut(got, "\n"); !strings.Contains(first, "unavailable: perf_event_open: EACCES (needs CAP_PERFMON)") {
		t.Errorf("first line %q: want the reason", first)
	}
	if !strings.Contains(got, "canary #42") || !strings.Contains(got, "5 misses") || !strings.Contains(got, "unexplained 5") {
		t.Errorf("want canary's 5 misses as unexplained:\n%s", got)
	}
	if strings.Contains(got, "quiet") {
		t.Errorf("a program without misses in the interval is listed:\n%s", got)
	}
}

// list's MISSES column: the count, and its explained causes; n/a where
// the kernel has no count.
func TestListMissesCell(t *testing.T) {
	p := &agent.ProgramStat{}
	if got := missesCell(p); got != "n/a" {
		t.Errorf("no recursion_misses (5.10): %q, want \"n/a\"", got)
	}
	n := uint64(14)
	p.RecursionMisses = &n
	if got := missesCell(p); got != "14" {
		t.Errorf("no watcher: %q, want \"14\"", got)
	}
	p.MissCauses = &agent.MissCauses{Recursion: 10, Preempted: 2, Unexplained: 2}
	if got := missesCell(p); got != "14 (r10 p2)" {
		t.Errorf("explained: %q, want \"14 (r10 p2)\"", got)
	}
}

// The attach types' misses in list's table and top's panel: n/a where
// the kernel counts no recursion misses (5.10), as a program's MISSES
// column, never a 0 it did not count; top adds the link misses.
func TestAttachTypeMissesCells(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name            string
		misses          *uint64
		linkMissed      uint64
		listCol, topCol string
	}{
		{"no recursion_misses (5.10)", nil, 0, "n/a", "n/a"},
		{"no recursion_misses, link missed", nil, 3, "n/a", "3"},
		{"none missed", u(0), 0, "0", "0"},
		{"both", u(5), 2, "5", "7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &agent.Snapshot{AttachTypes: []agent.AttachTypeStat{{AttachType: "kprobe", Programs: 1, RecursionMisses: tc.misses, LinkMissed: tc.linkMissed}}}
			var out bytes.Buffer
			if err := printTable(&out, s); err != nil {
				t.Fatal(err)
			}
			var row []string
			for _, l := range strings.Split(out.String(), "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] == "kprobe" {
					row = f
				}
			}
			// ATTACH TYPE, PROGRAMS, RUNS, RUN TIME, NS/RUN, RECURSION MISSES, LINK MISSED
			if len(row) != 7 || row[5] != tc.listCol {
				t.Errorf("list's attach type row %q, want RECURSION MISSES %s", row, tc.listCol)
			}
			panel := (&topView{}).attachPanel(s)
			// ATTACH TYPE, PROGS, RUNS/S, NS/RUN, CPU%, MISSES/S, MISSES, OVERHEAD
			if f := strings.Fields(panel[len(panel)-1]); len(f) != 8 || f[6] != tc.topCol {
				t.Errorf("top's attach type line %q, want MISSES %s", panel[len(panel)-1], tc.topCol)
			}
		})
	}
}

// --miss-budget's default is the agent's (internal/config is below agent).
func TestMissBudgetDefault(t *testing.T) {
	if config.DefaultMissBudget != agent.DefaultMissBudget || config.DefaultAgent().MissBudget != agent.DefaultMissBudget {
		t.Errorf("config.DefaultMissBudget %d, agent.DefaultMissBudget %d", config.DefaultMissBudget, agent.DefaultMissBudget)
	}
}
