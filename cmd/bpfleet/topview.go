package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bpfleet/bpfleet/agent"
)

var topSorts = []struct {
	name string
	less func(a, b *agent.ProgramStat) bool // "a comes first"
}{
	{"cpu", func(a, b *agent.ProgramStat) bool { return a.Delta.CPUShare > b.Delta.CPUShare }},
	{"runs", func(a, b *agent.ProgramStat) bool { return a.Delta.RunsPerSec > b.Delta.RunsPerSec }},
	{"misses", func(a, b *agent.ProgramStat) bool {
		if a.Delta.MissesPerSec != b.Delta.MissesPerSec {
			return a.Delta.MissesPerSec > b.Delta.MissesPerSec
		}
		return totalMisses(&a.Program) > totalMisses(&b.Program)
	}},
	{"nsrun", func(a, b *agent.ProgramStat) bool { return a.Delta.NsPerRun > b.Delta.NsPerRun }},
	{"mem", func(a, b *agent.ProgramStat) bool {
		return agent.ProgramMemory(&a.Program) > agent.ProgramMemory(&b.Program)
	}},
	{"id", func(a, b *agent.ProgramStat) bool { return a.ID < b.ID }},
	{"name", func(a, b *agent.ProgramStat) bool { return a.Name < b.Name }},
}

func totalMisses(p *agent.Program) uint64 {
	var n uint64
	if p.RecursionMisses != nil {
		n = *p.RecursionMisses
	}
	for _, l := range p.Links {
		if l.Missed != nil {
			n += *l.Missed
		}
	}
	return n
}

func (v *topView) matches(p *agent.ProgramStat) bool {
	if v.filter == "" {
		return true
	}
	f := strings.ToLower(v.filter)
	for _, s := range []string{p.Name, p.Type, p.AttachType, p.AttachTarget, strconv.FormatUint(uint64(p.ID), 10)} {
		if strings.Contains(strings.ToLower(s), f) {
			return true
		}
	}
	return false
}

// rows returns the visible programs in display order.
func (v *topView) rows(s *agent.Snapshot) []*agent.ProgramStat {
	out := make([]*agent.ProgramStat, 0, len(s.Programs))
	for i := range s.Programs {
		if v.matches(s.Programs[i]) {
			out = append(out, s.Programs[i])
		}
	}
	less := topSorts[v.sortIdx].less
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if v.reverse {
			a, b = b, a
		}
		if less(a, b) != less(b, a) {
			return less(a, b)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

const (
	ansiRed   = "\x1b[1;31m"
	ansiBold  = "\x1b[1m"
	ansiRev   = "\x1b[7m"
	ansiReset = "\x1b[0m"
)

func (v *topView) header(s *agent.Snapshot) string {
	dir := "↓"
	if v.reverse {
		dir = "↑"
	}
	stats := "stats on"
	if !s.Stats.Enabled {
		stats = "STATS OFF"
	}
	h := fmt.Sprintf("bpfleet top — %s %s, %s, %s — %d programs — interval %s — sort: %s %s",
		s.Kernel.Release, s.Kernel.Arch, stats, scanLabel(&s.Scan), len(s.Programs), s.Interval.Round(time.Millisecond), topSorts[v.sortIdx].name, dir)
	h += " — " + taxLine(s) + " — " + agentCPULine(s)
	if v.filter != "" {
		h += " — filter: " + v.filter
	}
	return h
}

// scanLabel says where the scan read programs from and, on the syscall
// path, why (cut short: the header is one line).
func scanLabel(st *agent.ScanStats) string {
	l := "scan: " + st.Source
	if st.FallbackReason != "" {
		r := []rune(st.FallbackReason)
		if len(r) > 60 {
			r = append(r[:59], '…')
		}
		l += " (" + string(r) + ")"
	}
	return l
}

// listLayout is one of the program list's two layouts: wide on terminals
// of fullWidth columns or more and in plain output, narrow below.
type listLayout int

const (
	layoutWide listLayout = iota
	layoutNarrow
	numLayouts
)

// fullWidth is the narrowest terminal that gets the wide layout.
const fullWidth = 128

// colAlign says how a cell sits in its column.
type colAlign int

const (
	alignRight colAlign = iota // numbers: padded on the left, never cut
	alignLeft                  // text: cut to the width with "…", padded on the right
	alignRest                  // the last column: as long as it is, after a wider gap
)

// colIn is how one layout shows a column: its header and width. A layout
// with no header leaves the column out.
type colIn struct {
	header string
	width  int
}

// listColumn is one column of the program list: how each layout shows it,
// its alignment, and a program's cell.
type listColumn struct {
	in    [numLayouts]colIn
	align colAlign
	cell  func(p *agent.ProgramStat) string
}

// listColumns are the list's columns in order, declared once so the two
// layouts cannot drift apart. The narrow one drops type, target and owner
// and narrows the rest, so the rates and memory still show on an 80-column
// terminal (the detail view has the rest). The wide one's columns before
// OWNER fit fullWidth.
var listColumns = []listColumn{
	{in: [numLayouts]colIn{{"ID", 7}, {"ID", 7}},
		cell: func(p *agent.ProgramStat) string { return strconv.FormatUint(uint64(p.ID), 10) }},
	{in: [numLayouts]colIn{{"NAME", 16}, {"NAME", 12}}, align: alignLeft,
		cell: func(p *agent.ProgramStat) string { return p.Name }},
	{in: [numLayouts]colIn{layoutWide: {"TYPE", 13}}, align: alignLeft,
		cell: func(p *agent.ProgramStat) string { return p.Type }},
	{in: [numLayouts]colIn{{"ATTACH", 12}, {"ATTACH", 8}}, align: alignLeft,
		cell: func(p *agent.ProgramStat) string { return p.AttachType }},
	{in: [numLayouts]colIn{layoutWide: {"TARGET", 16}}, align: alignLeft,
		cell: func(p *agent.ProgramStat) string { return p.AttachTarget }},
	{in: [numLayouts]colIn{{"RUNS/S", 11}, {"RUNS/S", 7}},
		cell: func(p *agent.ProgramStat) string { return fmtRate(p.Delta.RunsPerSec) }},
	{in: [numLayouts]colIn{{"NS/RUN", 9}, {"NS/RUN", 7}},
		cell: func(p *agent.ProgramStat) string { return fmtNs(p.Delta.NsPerRun) }},
	{in: [numLayouts]colIn{{"CPU%", 7}, {"CPU%", 6}},
		cell: func(p *agent.ProgramStat) string { return fmtPct(p.Delta.CPUShare) }},
	{in: [numLayouts]colIn{{"MISSES/S", 9}, {"MISS/S", 7}},
		cell: func(p *agent.ProgramStat) string { return fmtRate(p.Delta.MissesPerSec) }},
	{in: [numLayouts]colIn{{"MISSES", 10}, {"MISSES", 7}},
		cell: totalMissesCell},
	// The program's own memory (memlock, which holds the instructions, and JIT image); its
	// maps are in the detail view and `bpfleet maps`.
	{in: [numLayouts]colIn{{"MEM", 8}, {"MEM", 8}},
		cell: func(p *agent.ProgramStat) string { return fmtBytes(agent.ProgramMemory(&p.Program)) }},
	{in: [numLayouts]colIn{layoutWide: {"OWNER", 0}}, align: alignRest,
		cell: func(p *agent.ProgramStat) string { return ownerCell(p.Owners) }},
}

// totalMissesCell is a program's misses since load, n/a where the kernel
// counts none for it (no recursion misses field and no links).
func totalMissesCell(p *agent.ProgramStat) string {
	if p.RecursionMisses == nil && len(p.Links) == 0 {
		return "n/a"
	}
	return strconv.FormatUint(totalMisses(&p.Program), 10)
}

// attachMissesCell is an attach type's misses since load, recursion and
// link together: n/a where its programs have no recursion_misses and no
// link missed any, as totalMissesCell for a program.
func attachMissesCell(a *agent.AttachTypeStat) string {
	if a.RecursionMisses == nil && a.LinkMissed == 0 {
		return "n/a"
	}
	n := a.LinkMissed
	if a.RecursionMisses != nil {
		n += *a.RecursionMisses
	}
	return strconv.FormatUint(n, 10)
}

// columnsLine renders one line of the list in layout l, cell giving each
// shown column's text: the one function that draws both layouts, their
// headers and their program lines alike.
func columnsLine(l listLayout, cell func(c *listColumn, in colIn) string) string {
	var b strings.Builder
	first := true
	for i := range listColumns {
		c := &listColumns[i]
		in := c.in[l]
		if in.header == "" {
			continue
		}
		if !first {
			b.WriteByte(' ')
		}
		first = false
		text := cell(c, in)
		// Widths count runes, as fmt's padding does.
		pad := strings.Repeat(" ", max(in.width-utf8.RuneCountInString(text), 0))
		switch c.align {
		case alignRight:
			b.WriteString(pad + text)
		case alignLeft:
			b.WriteString(text + pad)
		case alignRest:
			b.WriteString(" " + text)
		}
	}
	return b.String()
}

// listHeader is the list's header line in layout l.
func listHeader(l listLayout) string {
	return columnsLine(l, func(_ *listColumn, in colIn) string { return in.header })
}

// programLine is p's line in layout l, and whether it missed runs this
// interval (drawn in red).
func programLine(l listLayout, p *agent.ProgramStat) (line string, missing bool) {
	line = columnsLine(l, func(c *listColumn, in colIn) string {
		text := c.cell(p)
		if c.align == alignLeft {
			text = trunc(text, in.width)
		}
		return text
	})
	return line, p.Delta.Misses+p.Delta.LinkMissed > 0
}

// listKeys is the list's key line; it fits 80 columns.
const listKeys = "q quit  ↑↓/jk select  Enter/d detail  s sort  r rev  c n m cpu/runs/miss  / filter"

// frame collects one screen of lines, each cut to the terminal's width and
// at most rows of them, so nothing wraps or scrolls.
type frame struct {
	rows, cols int
	ascii      bool
	lines      []string
}

func (f *frame) add(style, text string) {
	if len(f.lines) >= f.rows {
		return
	}
	if f.ascii {
		text = asciiOnly(text)
	}
	if r := []rune(text); len(r) > f.cols {
		text = string(r[:f.cols])
	}
	if style != "" {
		text = style + text + ansiReset
	}
	f.lines = append(f.lines, text)
}

// String is the frame as written to the terminal: home, clear, and the
// lines without a newline after the last (which would scroll a full screen).
func (f *frame) String() string {
	return "\x1b[H\x1b[2J" + strings.Join(f.lines, "\r\n")
}

// asciiOnly replaces what top draws beyond ASCII with ASCII look-alikes,
// and anything else (a process name, say) with '?'.
func asciiOnly(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r == '—':
			b.WriteByte('-')
		case r == '…':
			b.WriteString("...")
		case r == '↓':
			b.WriteByte('v')
		case r == '↑':
			b.WriteByte('^')
		case r == '→':
			b.WriteString("->")
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// renderScreen brings the view up to s (show) and draws one full frame for
// a rows×cols terminal from the view as it then is (drawList, drawDetail
// change nothing).
func (v *topView) renderScreen(s *agent.Snapshot, rows, cols int) string {
	sc := v.show(s, rows, cols)
	f := &frame{rows: rows, cols: cols, ascii: v.ascii}
	if v.detail.id != 0 {
		v.drawDetail(f, s)
	} else {
		v.drawList(f, s, sc)
	}
	return f.String()
}

// drawList draws the list: the header, the rows show chose and the
// attach-type panel.
func (v *topView) drawList(f *frame, s *agent.Snapshot, sc listPlan) {
	f.add(ansiBold, v.header(s))
	switch {
	case v.editing:
		f.add("", "filter: "+v.editBuf+"_")
	case v.status != "":
		f.add(ansiRed, v.status)
	default:
		f.add("", listKeys)
	}
	f.add(ansiRev, listHeader(sc.layout))
	progs, room := sc.progs, sc.room
	for i := v.offset; i < len(progs) && i < v.offset+room; i++ {
		p := progs[i]
		text, missing := programLine(sc.layout, p)
		style := ""
		switch {
		case i == v.selIdx && missing:
			style = "\x1b[1;31;7m"
		case i == v.selIdx:
			style = ansiRev
		case missing:
			style = ansiRed
		}
		f.add(style, text)
	}
	if sc.more {
		f.add("", fmt.Sprintf("… %d more (rows %d-%d shown)", len(progs)-room, v.offset+1, min(v.offset+room, len(progs))))
	}
	f.add("", "")
	for i, l := range sc.panel {
		style := ""
		if i == 0 {
			style = ansiRev
		}
		f.add(style, l)
	}
}

func (v *topView) attachPanel(s *agent.Snapshot) []string {
	out := []string{fmt.Sprintf("%-16s %5s %11s %9s %7s %9s %12s %12s", "ATTACH TYPE", "PROGS", "RUNS/S", "NS/RUN", "CPU%", "MISSES/S", "MISSES", "OVERHEAD")}
	for _, a := range s.AttachTypes {
		over := "-"
		if a.OverheadNs != nil {
			over = fmtNs(*a.OverheadNs) + " ns"
		}
		out = append(out, fmt.Sprintf("%-16s %5d %11s %9s %7s %9s %12s %12s", trunc(a.AttachType, 16), a.Programs,
			fmtRate(a.Delta.RunsPerSec), fmtNs(a.Delta.NsPerRun), fmtPct(a.Delta.CPUShare), fmtRate(a.Delta.MissesPerSec),
			attachMissesCell(&a), over))
	}
	return out
}

// renderPlain writes one interval as plain lines, without escapes.
func (v *topView) renderPlain(w io.Writer, s *agent.Snapshot) {
	fmt.Fprintf(w, "%s %s\n", s.Time.UTC().Format(time.RFC3339), v.header(s))
	fmt.Fprintln(w, listHeader(layoutWide))
	for _, p := range v.rows(s) {
		text, missing := programLine(layoutWide, p)
		if missing {
			text += "  MISSING"
		}
		fmt.Fprintln(w, text)
	}
	for _, l := range append(v.attachPanel(s), profilePanel(s)...) {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

func fmtRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r >= 1e6:
		return strconv.FormatFloat(r/1e6, 'f', 2, 64) + "M"
	case r >= 1e3:
		return strconv.FormatFloat(r/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

func fmtNs(ns float64) string {
	if ns == 0 {
		return "-"
	}
	return strconv.FormatFloat(ns, 'f', 1, 64)
}

func fmtPct(share float64) string {
	return strconv.FormatFloat(share*100, 'f', 2, 64)
}
