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
	var back missRecord
	if err := json.Unmarshal([]byte(ls[1]), &back); err != nil || back.Type != recordMiss || back.Cause != agent.CauseInterrupt || len(back.Stack) != 2 {
		t.Errorf("jsonl line %q: %+v, %v", ls[1], back, err)
	}
}

// jsonl starts with the watcher's state, repeats it only when it changes
// (not for its running totals), and gives each interval's misses per
// program by cause, adding up to the kernel's count; a refused watcher
// says so in its record.
func TestMissesJSONRecords(t *testing.T) {
	n := uint64(12)
	t0 := time.Unix(100, 0)
	armed := agent.MissWatch{Available: true, Budget: 64, Watched: []agent.WatchedProgram{{ProgID: 42, ProgName: "canary", Since: t0, Why: "missing"}}}
	counted := armed
	counted.Samples = 3
	counted.Watched = []agent.WatchedProgram{{ProgID: 42, ProgName: "canary", Since: t0, Why: "missing", Samples: 3}}
	later := counted
	later.Watched = []agent.WatchedProgram{{ProgID: 42, ProgName: "canary", Since: t0, Why: "missed-before", Samples: 3}}
	refused := agent.MissWatch{Reason: "perf_event_open: EACCES (needs CAP_PERFMON)"}
	prog := func(misses uint64, c agent.MissCauses) *agent.ProgramStat {
		return &agent.ProgramStat{Program: agent.Program{ID: 42, Name: "canary", RecursionMisses: &n}, Delta: agent.Rates{Misses: misses}, DeltaCauses: c}
	}
	for _, tc := range []struct {
		name     string
		states   []agent.MissWatch
		progs    []*agent.ProgramStat
		watchers int
	}{
		{"armed, totals move, then the reason changes", []agent.MissWatch{armed, armed, counted, later},
			[]*agent.ProgramStat{prog(5, agent.MissCauses{Recursion: 3}), prog(0, agent.MissCauses{}), prog(2, agent.MissCauses{Recursion: 2})}, 2},
		{"refused", []agent.MissWatch{refused, refused, refused, refused},
			[]*agent.ProgramStat{prog(5, agent.MissCauses{}), prog(1, agent.MissCauses{}), prog(0, agent.MissCauses{})}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			src := func(context.Context) (missBatch, error) {
				b := missBatch{watch: tc.states[i], snap: &agent.Snapshot{Time: t0.Add(time.Duration(i) * time.Second)}}
				if i > 0 {
					b.snap.Programs = []*agent.ProgramStat{tc.progs[i-1]}
				}
				i++
				return b, nil
			}
			var out bytes.Buffer
			if err := runMisses(context.Background(), src, "jsonl", &out, time.Millisecond, len(tc.states)-1, true); err != nil {
				t.Fatal(err)
			}
			var watchers, intervals int
			var want uint64
			for _, p := range tc.progs {
				want += p.Delta.Misses
			}
			var got uint64
			for j, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var r struct {
					Type      string           `json:"type"`
					Available bool             `json:"available"`
					Reason    string           `json:"reason"`
					Misses    uint64           `json:"misses"`
					Causes    agent.MissCauses `json:"causes"`
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				switch r.Type {
				case recordWatcher:
					watchers++
					if r.Available != tc.states[0].Available || r.Reason != tc.states[0].Reason {
						t.Errorf("watcher record %q, want available %v, reason %q", l, tc.states[0].Available, tc.states[0].Reason)
					}
				case recordInterval:
					intervals++
					got += r.Misses
					if r.Causes.Sum() != r.Misses {
						t.Errorf("interval record %q: causes add up to %d, not its %d misses", l, r.Causes.Sum(), r.Misses)
					}
				default:
					t.Errorf("line %d %q: type %q", j, l, r.Type)
				}
				if j == 0 && r.Type != recordWatcher {
					t.Errorf("first line %q: want the watcher's state", l)
				}
			}
			if watchers != tc.watchers || got != want || intervals != 2 {
				t.Errorf("%d watcher records (want %d), %d interval records with %d misses (want 2 with %d):\n%s", watchers, tc.watchers, intervals, got, want, out.String())
			}
		})
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
