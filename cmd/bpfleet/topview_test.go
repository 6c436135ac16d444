package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
)

func TestDecodeKeys(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"q", []int{'q'}},
		{"\x1b", []int{keyEsc}},
		{"\x1b[A\x1b[B", []int{keyUp, keyDown}},
		{"\x1bOA", []int{keyUp}}, // application cursor mode
		{"\x1b[5~\x1b[6~\x1b[H\x1b[4~", []int{keyPgUp, keyPgDn, keyHome, keyEnd}},
		{"\x1b[1;5A", []int{keyUp}},   // Ctrl-Up: still up
		{"\x1b[15~j", []int{'j'}},     // F5: dropped whole, not typed
		{"\x1bq", []int{keyEsc, 'q'}}, // Esc then q, read together
		{"/ab\r", []int{'/', 'a', 'b', '\r'}},
	} {
		if got := decodeKeys([]byte(c.in)); !slices.Equal(got, c.want) {
			t.Errorf("decodeKeys(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestUTF8Locale(t *testing.T) {
	for _, c := range []struct {
		all, ctype, lang string
		want             bool
	}{
		{"", "", "en_US.UTF-8", true},
		{"", "", "C.utf8", true},
		{"", "", "", false},
		{"C", "", "en_US.UTF-8", false}, // LC_ALL wins
		{"", "POSIX", "en_US.UTF-8", false},
		{"", "de_DE.UTF-8", "C", true},
		{"", "", "en_US.ISO-8859-1", false},
	} {
		t.Setenv("LC_ALL", c.all)
		t.Setenv("LC_CTYPE", c.ctype)
		t.Setenv("LANG", c.lang)
		if got := utf8Locale(); got != c.want {
			t.Errorf("LC_ALL=%q LC_CTYPE=%q LANG=%q: utf8Locale() = %v, want %v", c.all, c.ctype, c.lang, got, c.want)
		}
	}
}

func pts(deltas ...uint64) []history.Point {
	var out []history.Point
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i, d := range deltas {
		out = append(out, history.Point{Time: t0.Add(time.Duration(i+1) * time.Second), Interval: time.Second, Runs: d, RecursionMisses: &d})
	}
	return out
}

// Columns fold points evenly, the newest always alone at the right when
// they fit, and a folded column's rate is its sum over its time.
func TestColumns(t *testing.T) {
	for _, c := range []struct {
		n, width int
		want     []float64 // runs per column
	}{
		{3, 10, []float64{1, 2, 3}},
		{4, 2, []float64{1 + 2, 3 + 4}},
		{300, 48, nil}, // folded 7 to a column
	} {
		var d []uint64
		for i := 1; i <= c.n; i++ {
			d = append(d, uint64(i))
		}
		cols := columns(pts(d...), c.width)
		if len(cols) > c.width {
			t.Errorf("%d points in %d columns: got %d columns", c.n, c.width, len(cols))
		}
		if c.want == nil {
			continue
		}
		var got []float64
		for _, a := range cols {
			got = append(got, a.runs)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%d points in %d columns: runs %v, want %v", c.n, c.width, got, c.want)
		}
	}
	cols := columns(pts(1, 2, 3, 4, 5), 2)
	if len(cols) != 2 || cols[0].runs != 3 || cols[1].runs != 12 || cols[1].dt != 3 {
		t.Errorf("5 points in 2 columns = %+v, want {1,2} and {3,4,5}", cols)
	}
	if got := perSec(cols[1].runs, cols[1].dt); got != 4 {
		t.Errorf("rate of the folded column = %v, want 12 runs / 3 s", got)
	}
}

func TestSparkRows(t *testing.T) {
	rows := sparkRows([]float64{0, 1, 8, 16}, 16, 6, 2, false)
	want := []string{"     █", "   ▁██"}
	if !slices.Equal(rows, want) {
		t.Errorf("sparkRows = %q, want %q", rows, want)
	}
	// A tiny value beside a large peak still shows.
	if rows := sparkRows([]float64{0.001, 1000}, 1000, 2, 1, true); rows[0] != ".#" {
		t.Errorf("ascii sparkRows = %q, want %q", rows[0], ".#")
	}
}

func fixtureSnapshot(n int) *agent.Snapshot {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := &agent.Snapshot{Seq: 2, Time: t0, Interval: time.Second, Kernel: agent.KernelInfo{Release: "6.18.0", Arch: "x86_64"}, Stats: agent.StatsState{Enabled: true},
		MapScan: agent.MapScan{Source: agent.ScanSourceIterator}}
	// Twelve maps, every program using them all: more than a detail view
	// has lines for on a small terminal. The first is a hash map 9/64 full.
	var mapIDs []uint32
	for i := 1; i <= 12; i++ {
		mem := uint64(i) << 12
		m := agent.Map{ID: uint32(i), Name: fmt.Sprintf("map_%d_with_a_long_name", i), Type: "array", MaxEntries: 16, MemoryBytes: &mem, EntriesReason: "not a hash map"}
		if i == 1 {
			e, f := uint64(9), 9.0/64
			m.Type, m.MaxEntries, m.Entries, m.Fullness, m.EntriesReason = "hash", 64, &e, &f, ""
		}
		s.Maps = append(s.Maps, &m)
		mapIDs = append(mapIDs, m.ID)
	}
	for i := 1; i <= n; i++ {
		m := uint64(i * 3)
		memlock := uint64(4096)

		s.Programs = append(s.Programs, &agent.ProgramStat{
			Program: agent.Program{ID: uint32(i), Name: fmt.Sprintf("prog_%d_with_a_long_name", i), Type: "tracing", AttachType: "fentry",
				AttachTarget: "some_kernel_function_with_a_long_name", RecursionMisses: &m, MissKind: agent.MissKindRecursion,
				Owners: []agent.Owner{{PID: 100 + i, Comm: "café-agent", ContainerID: strings.Repeat("ab", 32), Runtime: "containerd", PodName: "pod", PodNamespace: "ns"}},
				Links:  []agent.Link{{ID: uint32(1000 + i), Type: "perf_event", Missed: &m}},
				MapIDs: mapIDs, JitedSize: 100, XlatedSize: 124 * uint32(i), Memlock: &memlock},
			Delta: agent.Rates{Runs: uint64(i * 100), RunTimeNs: uint64(i * 10000), Misses: uint64(i), RunsPerSec: float64(i * 100), CPUShare: 0.001 * float64(i), NsPerRun: 100},
		})
	}
	s.Episodes = []agent.Episode{{Source: agent.SourceRecursionMisses, ProgID: 1, Open: true, Start: t0.Add(-time.Minute), End: t0, Misses: 60, Runs: 600, PeakRate: 2}}
	return s
}

// Every frame, list or detail, fits the terminal at any size, and the
// ASCII mode writes no byte beyond ASCII even with a non-ASCII comm.
func TestFramesFit(t *testing.T) {
	snap := fixtureSnapshot(40)
	store := history.New(300)
	for i := 0; i < 400; i++ {
		s := *snap
		s.Time = snap.Time.Add(time.Duration(i) * time.Second)
		store.Record(&s)
	}
	for _, ascii := range []bool{false, true} {
		for _, size := range [][2]int{{24, 80}, {10, 40}, {60, 200}, {3, 20}} {
			v := newTopView()
			v.ascii = ascii
			v.renderScreen(snap, size[0], size[1])
			second := v.ids[1]
			v.key(keyDown)
			v.key('\r')
			if v.detail.id != second {
				t.Fatalf("Enter after one Down opened %d, want the second row's program %d", v.detail.id, second)
			}
			sr, _ := store.Series(second)
			v.setHistory(&sr, nil)
			for _, view := range []string{"detail", "list"} {
				out := v.renderScreen(snap, size[0], size[1])
				frame := strings.ReplaceAll(ansi.ReplaceAllString(out, ""), "\r", "")
				lines := strings.Split(frame, "\n")
				if len(lines) > size[0] {
					t.Errorf("ascii=%v %s %dx%d: %d lines", ascii, view, size[0], size[1], len(lines))
				}
				for _, l := range lines {
					if utf8.RuneCountInString(l) > size[1] {
						t.Errorf("ascii=%v %s %dx%d: line %q is wider", ascii, view, size[0], size[1], l)
					}
				}
				if ascii && strings.IndexFunc(out, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0 {
					t.Errorf("%s %dx%d in ascii mode has non-ASCII: %q", view, size[0], size[1], frame)
				}
				v.key(keyEsc)
			}
		}
	}
}

// The selection follows its program when the order changes, and falls to
// the row at its place when the program goes.
func TestSelectionFollowsProgram(t *testing.T) {
	snap := fixtureSnapshot(5)
	v := newTopView()
	v.renderScreen(snap, 24, 200) // sorted by cpu: 5 4 3 2 1
	v.key('j')
	v.key('j')
	if v.selected != 3 {
		t.Fatalf("two rows down selects %d, want 3", v.selected)
	}
	v.key('m') // sort by misses: same order here
	v.key('r') // reversed: 1 2 3 4 5
	v.renderScreen(snap, 24, 200)
	if v.selected != 3 || v.selIdx != 2 {
		t.Errorf("after reversing, selection is %d at %d, want 3 at 2", v.selected, v.selIdx)
	}
	gone := *snap
	gone.Programs = slices.DeleteFunc(slices.Clone(snap.Programs), func(p *agent.ProgramStat) bool { return p.ID == 3 })
	v.renderScreen(&gone, 24, 200)
	if v.selected != 4 {
		t.Errorf("after program 3 went, selection is %d, want 4 (now at its row)", v.selected)
	}
	v.key('G')
	if v.selected != 5 {
		t.Errorf("End selects %d, want the last row 5", v.selected)
	}
}

// An open view whose program is gone says when, and keeps its facts.
func TestDetailUnloaded(t *testing.T) {
	snap := fixtureSnapshot(2)
	v := newTopView()
	v.renderScreen(snap, 24, 80)
	v.key('d')
	id := v.detail.id
	later := *snap
	later.Time = snap.Time.Add(2 * time.Second)
	later.Programs = slices.DeleteFunc(slices.Clone(snap.Programs), func(p *agent.ProgramStat) bool { return p.ID == id })
	frame := ansi.ReplaceAllString(v.renderScreen(&later, 24, 80), "")
	want := fmt.Sprintf("program %d unloaded at %s", id, later.Time.Local().Format("15:04:05"))
	if !strings.Contains(frame, want) || !strings.Contains(frame, "prog_2_with_a_long") {
		t.Errorf("frame lacks %q or the program's facts:\n%s", want, frame)
	}
	// The time stays that of the first scan without it.
	evenLater := later
	evenLater.Time = later.Time.Add(time.Minute)
	if frame := ansi.ReplaceAllString(v.renderScreen(&evenLater, 24, 80), ""); !strings.Contains(frame, want) {
		t.Errorf("a later frame moved the unload time:\n%s", frame)
	}
}

// A kprobe program's view graphs its links' missed counter apart from
// recursion misses, with the newest interval's count.
func TestDetailLinkMissed(t *testing.T) {
	snap := fixtureSnapshot(1)
	snap.Programs[0].MapIDs = nil // room for every fact on 24 rows
	store := history.New(10)
	for i := 0; i < 4; i++ {
		s := *snap
		s.Time = snap.Time.Add(time.Duration(i) * time.Second)
		p := *s.Programs[0]
		p.Delta.Misses, p.Delta.LinkMissed = 2, uint64(i+1)
		s.Programs = []*agent.ProgramStat{&p}
		store.Record(&s)
	}
	v := newTopView()
	v.renderScreen(snap, 24, 80)
	v.key('\r')
	sr, _ := store.Series(1)
	v.setHistory(&sr, nil)
	frame := ansi.ReplaceAllString(v.renderScreen(snap, 24, 80), "")
	for _, want := range []string{"link missed/s  last 4.0 (+4)", "misses/s (recursion)  last 2.0 (+2)", "links     1001 perf_event", "            missed 3", "open miss episode since"} {
		if !strings.Contains(frame, want) {
			t.Errorf("detail view lacks %q:\n%s", want, frame)
		}
	}
}

// The list's MEM column is the program's own memory; the detail view lists
// its maps under their memory counted once, each with entries/max, a
// fullness bar and its memory, and says how many more there are when the
// terminal is short.
func TestDetailMaps(t *testing.T) {
	snap := fixtureSnapshot(2)
	v := newTopView()
	v.setSort("id")
	list := strings.ReplaceAll(ansi.ReplaceAllString(v.renderScreen(snap, 24, 80), ""), "\r", "")
	if !strings.Contains(list, " MEM") || !regexp.MustCompile(`(?m)^ +1 .* 4\.1 KiB$`).MatchString(list) {
		t.Errorf("list lacks the MEM column or program 1's memlock and JIT image (4096 + 100 bytes; the translated instructions are inside memlock) as 4.1 KiB:\n%s", list)
	}
	v.key('d')
	for _, c := range []struct {
		rows  int
		ascii bool
		want  []string
	}{
		{60, false, []string{"MAPS (12)", "312 KiB", "  map_1_with_a_l… hash                9/64 █░░░░░░░░░ 14%    4.0 KiB", "  map_12_with_a_… array               -/16 -                48.0 KiB", "memory    4.1 KiB"}},
		{60, true, []string{"9/64 #......... 14%"}},
		{24, false, []string{"MAPS (12)", "map_4_with", "+8 more maps (bpfleet maps --prog 1)"}},
	} {
		v.ascii = c.ascii
		frame := ansi.ReplaceAllString(v.renderScreen(snap, c.rows, 100), "")
		for _, w := range c.want {
			if !strings.Contains(frame, w) {
				t.Errorf("%d rows, ascii %v: detail view lacks %q:\n%s", c.rows, c.ascii, w, frame)
			}
		}
	}
	// Maps not read: the view says so rather than listing nothing.
	noMaps := *snap
	noMaps.Maps, noMaps.MapScan = nil, agent.MapScan{}
	if frame := ansi.ReplaceAllString(v.renderScreen(&noMaps, 40, 100), ""); !strings.Contains(frame, "maps: 12, not read (--no-maps)") {
		t.Errorf("without maps read the view does not say so:\n%s", frame)
	}
}

// The detail view shows the program's misses by cause and its last
// sampled misses with their stacks, each snapshot's taken once.
func TestDetailMissCauses(t *testing.T) {
	snap := fixtureSnapshot(1)
	snap.Programs[0].MapIDs = nil
	p := *snap.Programs[0]
	n := uint64(14)
	p.RecursionMisses, p.MissCauses = &n, &agent.MissCauses{Recursion: 10, Preempted: 2, Unexplained: 2}
	snap.Programs = []*agent.ProgramStat{&p}
	snap.Seq = 5
	snap.Misses = []agent.MissSample{{Time: snap.Time, ProgID: p.ID, CPU: 3, Context: agent.ContextTask, Cause: agent.CauseRecursion,
		PID: 77, Comm: "loader", Stack: []string{"bpf_prog_inc_misses_counter+0x10", "htab_map_delete_elem+0x5"}}}
	for _, ascii := range []bool{false, true} {
		v := newTopView()
		v.ascii = ascii
		v.renderScreen(snap, 40, 100)
		v.key('\r')
		v.renderScreen(snap, 40, 100) // a redraw of the same snapshot adds nothing
		frame := ansi.ReplaceAllString(v.renderScreen(snap, 40, 100), "")
		arrow := " ← "
		if ascii {
			arrow = " <- "
		}
		for _, want := range []string{"causes    r10 p2 u2", "cpu3 task recursion loader[77]", "bpf_prog_inc_misses_counter+0x10" + arrow + "htab_map_delete_elem+0x5"} {
			if !strings.Contains(frame, want) {
				t.Errorf("ascii=%v: detail view lacks %q:\n%s", ascii, want, frame)
			}
		}
		if c := strings.Count(frame, "cpu3 task recursion"); c != 1 {
			t.Errorf("ascii=%v: the miss shown %d times, want once", ascii, c)
		}
	}
}
