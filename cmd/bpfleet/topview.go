package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// topView is top's state between frames: sort, filter, and the key-entry
// mode. Rendering is a pure function of the view and a snapshot.
type topView struct {
	sortIdx int
	reverse bool
	filter  string
	editing bool
	editBuf string
	status  string
}

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
	{"id", func(a, b *agent.ProgramStat) bool { return a.ID < b.ID }},
	{"name", func(a, b *agent.ProgramStat) bool { return a.Name < b.Name }},
}

func newTopView() *topView { return &topView{} }

func (v *topView) setSort(name string) error {
	for i, s := range topSorts {
		if s.name == name {
			v.sortIdx = i
			return nil
		}
	}
	names := make([]string, len(topSorts))
	for i, s := range topSorts {
		names[i] = s.name
	}
	return fmt.Errorf("unknown sort %q: use one of %s", name, strings.Join(names, ", "))
}

// key handles one key press and reports whether top should quit.
func (v *topView) key(k byte) (quit bool) {
	if v.editing {
		switch k {
		case '\r', '\n':
			v.filter, v.editing = v.editBuf, false
		case 27: // Esc
			v.editing, v.editBuf = false, ""
		case 127, 8:
			if v.editBuf != "" {
				v.editBuf = v.editBuf[:len(v.editBuf)-1]
			}
		default:
			if k >= 32 && k < 127 {
				v.editBuf += string(rune(k))
			}
		}
		return false
	}
	switch k {
	case 'q', 3: // q, Ctrl-C
		return true
	case 's':
		v.sortIdx = (v.sortIdx + 1) % len(topSorts)
	case 'r':
		v.reverse = !v.reverse
	case 'c':
		v.setSort("cpu")
	case 'n':
		v.setSort("runs")
	case 'm':
		v.setSort("misses")
	case '/':
		v.editing, v.editBuf = true, v.filter
	case 27:
		v.filter = ""
	}
	return false
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
		if v.matches(&s.Programs[i]) {
			out = append(out, &s.Programs[i])
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
	h := fmt.Sprintf("bpfleet top — %s %s, %s — %d programs — interval %s — sort: %s %s",
		s.Kernel.Release, s.Kernel.Arch, stats, len(s.Programs), s.Interval.Round(time.Millisecond), topSorts[v.sortIdx].name, dir)
	if v.filter != "" {
		h += " — filter: " + v.filter
	}
	return h
}

const topColumns = "%7s %-16s %-14s %-12s %-22s %11s %9s %7s %9s %10s  %s"

func programLine(p *agent.ProgramStat) (line string, missing bool) {
	m := totalMisses(&p.Program)
	misses := strconv.FormatUint(m, 10)
	if p.RecursionMisses == nil && len(p.Links) == 0 {
		misses = "n/a"
	}
	line = fmt.Sprintf(topColumns, strconv.FormatUint(uint64(p.ID), 10), trunc(p.Name, 16), trunc(p.Type, 14),
		trunc(p.AttachType, 12), trunc(p.AttachTarget, 22), fmtRate(p.Delta.RunsPerSec), fmtNs(p.Delta.NsPerRun),
		fmtPct(p.Delta.CPUShare), fmtRate(p.Delta.MissesPerSec), misses, ownerCell(p.Owners))
	return line, p.Delta.Misses+p.Delta.LinkMissed > 0
}

func columnsHeader() string {
	return fmt.Sprintf(topColumns, "ID", "NAME", "TYPE", "ATTACH", "TARGET", "RUNS/S", "NS/RUN", "CPU%", "MISSES/S", "MISSES", "OWNER")
}

// renderScreen draws one full frame for a rows×cols terminal.
func (v *topView) renderScreen(s *agent.Snapshot, rows, cols int) string {
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	line := func(style, text string) {
		if r := []rune(text); len(r) > cols {
			text = string(r[:cols])
		}
		b.WriteString(style + text + ansiReset + "\r\n")
	}
	line(ansiBold, v.header(s))
	switch {
	case v.editing:
		line("", "filter: "+v.editBuf+"_")
	case v.status != "":
		line(ansiRed, v.status)
	default:
		line("", "q quit  s sort  r reverse  c cpu  n runs  m misses  / filter  Esc clear")
	}
	panel := v.attachPanel(s)
	room := rows - 4 - len(panel)
	line(ansiRev, columnsHeader())
	progs := v.rows(s)
	for i, p := range progs {
		if i >= room {
			line("", fmt.Sprintf("… %d more", len(progs)-i))
			break
		}
		text, missing := programLine(p)
		style := ""
		if missing {
			style = ansiRed
		}
		line(style, text)
	}
	b.WriteString("\r\n")
	for i, l := range panel {
		style := ""
		if i == 0 {
			style = ansiRev
		}
		line(style, l)
	}
	return b.String()
}

func (v *topView) attachPanel(s *agent.Snapshot) []string {
	out := []string{fmt.Sprintf("%-16s %5s %11s %9s %7s %9s %12s %12s", "ATTACH TYPE", "PROGS", "RUNS/S", "NS/RUN", "CPU%", "MISSES/S", "MISSES", "OVERHEAD")}
	for _, a := range s.AttachTypes {
		over := "-"
		if a.OverheadNs != nil {
			over = fmtNs(*a.OverheadNs) + " ns"
		}
		out = append(out, fmt.Sprintf("%-16s %5d %11s %9s %7s %9s %12d %12s", trunc(a.AttachType, 16), a.Programs,
			fmtRate(a.Delta.RunsPerSec), fmtNs(a.Delta.NsPerRun), fmtPct(a.Delta.CPUShare), fmtRate(a.Delta.MissesPerSec),
			a.RecursionMisses+a.LinkMissed, over))
	}
	return out
}

// renderPlain writes one interval as plain lines, without escapes.
func (v *topView) renderPlain(w io.Writer, s *agent.Snapshot) {
	fmt.Fprintf(w, "%s %s\n", s.Time.UTC().Format(time.RFC3339), v.header(s))
	fmt.Fprintln(w, columnsHeader())
	for _, p := range v.rows(s) {
		text, missing := programLine(p)
		if missing {
			text += "  MISSING"
		}
		fmt.Fprintln(w, text)
	}
	for _, l := range v.attachPanel(s) {
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
