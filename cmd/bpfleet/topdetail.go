package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
)

// detailKeys is the detail view's key line.
const detailKeys = "Esc back  ↑↓/jk previous/next program  q quit"

// factsWidth is the width of the facts column beside the graphs.
const factsWidth = 31

// drawDetail draws the open program's graphs with its facts beside them,
// and its open miss episodes below.
func (v *topView) drawDetail(f *frame, s *agent.Snapshot) {
	d := &v.detail
	gone := d.gone

	name := ""
	if d.prog != nil {
		name = d.prog.Name
	}
	f.add(ansiBold, fmt.Sprintf("bpfleet top — program %d %s — %s %s — interval %s", d.id, name,
		s.Kernel.Release, s.Kernel.Arch, s.Interval.Round(time.Millisecond)))
	f.add("", detailKeys)
	switch {
	case gone:
		f.add(ansiRed, fmt.Sprintf("program %d unloaded at %s — its last facts and history are shown", d.id, d.unloaded.Local().Format("15:04:05")))
	case v.status != "":
		f.add(ansiRed, v.status)
	case d.err != "":
		f.add(ansiRed, "history: "+d.err)
	default:
		f.add("", v.windowLine())
	}

	var pts []history.Point
	if d.series != nil {
		pts = d.series.Points
	}
	episodes := v.episodeLines(s)
	// The last sampled misses take at most a third of what is left.
	episodes = append(episodes, v.missLines(f.cols, (f.rows-3-len(episodes))/3)...)
	// The program's maps take at most a third of what is left, the graphs
	// and facts the rest.
	maps := v.mapLines(s, (f.rows-3-len(episodes))/3)
	body := f.rows - 3 - len(episodes) - len(maps)
	fw := factsWidth
	if f.cols < 2*factsWidth {
		fw = 0 // too narrow for columns: graphs only
	}
	gw := f.cols - fw
	if fw > 0 {
		gw-- // the gap
	}
	left := v.graphLines(pts, gw, body)
	var right []string
	if fw > 0 {
		right = v.factLines()
	}
	for i := 0; i < body && (i < len(left) || i < len(right)); i++ {
		l, r := "", ""
		if i < len(left) {
			l = left[i]
		}
		if i < len(right) {
			r = right[i]
		}
		if fw > 0 {
			l = padRunes(l, gw) + " " + r
		}
		f.add("", l)
	}
	for len(f.lines) < f.rows-len(episodes)-len(maps) {
		f.add("", "")
	}
	for i, l := range maps {
		style := ""
		if i == 0 {
			style = ansiRev
		}
		f.add(style, l)
	}
	for _, e := range episodes {
		f.add(ansiRed, e)
	}
}

// windowLine says how much history the graphs cover.
func (v *topView) windowLine() string {
	sr := v.detail.series
	if sr == nil || len(sr.Points) == 0 {
		return "no history yet: the first point comes one interval after the program is first seen"
	}
	first, last := sr.Points[0], sr.Points[len(sr.Points)-1]
	span := last.Time.Sub(first.Time) + first.Interval
	return fmt.Sprintf("history: last %s, %d of %d points, newest at %s", span.Round(time.Second), len(sr.Points), sr.Capacity, last.Time.Local().Format("15:04:05"))
}

// agg is the sum of consecutive points drawn as one graph column; rates of
// a column are its sums over its time, so a column is exact whatever the
// number of points in it.
type agg struct {
	dt, runs, runTime, misses, linkMissed float64
}

func (a *agg) add(p history.Point) {
	a.dt += p.Interval.Seconds()
	a.runs += float64(p.Runs)
	a.runTime += float64(p.RunTimeNs)
	if p.RecursionMisses != nil {
		a.misses += float64(*p.RecursionMisses)
	}
	a.linkMissed += float64(p.LinkMissed)
}

func perSec(x, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	return x / dt
}

// columns folds pts into at most width columns, newest in the last one,
// each holding the same number of points.
func columns(pts []history.Point, width int) []agg {
	if len(pts) == 0 || width < 1 {
		return nil
	}
	k := (len(pts) + width - 1) / width
	n := (len(pts) + k - 1) / k
	out := make([]agg, n)
	for i, p := range pts {
		out[n-1-(len(pts)-1-i)/k].add(p)
	}
	return out
}

type graphSpec struct {
	label string
	value func(a agg) float64
	unit  func(float64) string
	// delta is the newest point's counter delta shown next to its rate.
	delta func(p history.Point) (uint64, bool)
}

func (v *topView) graphSpecs() (graphs []graphSpec, linkNA bool) {
	kind := agent.MissKindUnknown
	hasRM, hasLM := true, false
	if sr := v.detail.series; sr != nil {
		kind, hasRM, hasLM = orDash(sr.MissKind), sr.HasRecursionMisses, sr.HasLinkMissed
	}
	if p := v.detail.prog; p != nil {
		kind = orDash(p.MissKind)
		for _, l := range p.Links {
			if l.Missed != nil {
				hasLM = true
			}
		}
	}
	graphs = []graphSpec{
		{"runs/s", func(a agg) float64 { return perSec(a.runs, a.dt) }, fmtRate,
			func(p history.Point) (uint64, bool) { return p.Runs, true }},
		{"ns/run", func(a agg) float64 { return perSec(a.runTime, a.runs) }, fmtNs, nil},
		{"CPU %", func(a agg) float64 { return 100 * perSec(a.runTime, a.dt*1e9) }, fmtPercent, nil},
	}
	if hasRM {
		graphs = append(graphs, graphSpec{"misses/s (" + kind + ")", func(a agg) float64 { return perSec(a.misses, a.dt) }, fmtRate,
			func(p history.Point) (uint64, bool) {
				if p.RecursionMisses == nil {
					return 0, false
				}
				return *p.RecursionMisses, true
			}})
	} else {
		graphs = append(graphs, graphSpec{label: "misses/s n/a: kernel has no recursion_misses"})
	}
	if hasLM {
		graphs = append(graphs, graphSpec{"link missed/s", func(a agg) float64 { return perSec(a.linkMissed, a.dt) }, fmtRate,
			func(p history.Point) (uint64, bool) { return p.LinkMissed, true }})
	} else {
		graphs, linkNA = append(graphs, graphSpec{label: "link missed/s n/a: no kprobe link"}), true
	}
	return graphs, linkNA
}

// fmtPercent keeps three significant digits below 1%: a BPF program's
// share is often a few thousandths of a percent, which "0.00" would hide.
func fmtPercent(x float64) string {
	if x > 0 && x < 1 {
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// graphLines draws the graphs into width columns and at most rows lines,
// with a time axis under them.
func (v *topView) graphLines(pts []history.Point, width, rows int) []string {
	graphs, _ := v.graphSpecs()
	drawn, textOnly := 0, 0
	for _, g := range graphs {
		if g.value != nil {
			drawn++
		} else {
			textOnly++
		}
	}
	height := 1
	if drawn > 0 {
		height = min(max((rows-1-len(graphs))/drawn, 1), 4)
	}
	cols := columns(pts, width)
	var out []string
	for _, g := range graphs {
		if g.value == nil {
			out = append(out, g.label)
			continue
		}
		vals := make([]float64, len(cols))
		peak := 0.0
		for i, c := range cols {
			vals[i] = g.value(c)
			peak = math.Max(peak, vals[i])
		}
		// The title's max is the highest single interval, which a folded
		// column averages away; the bars scale to the columns.
		maxPoint := 0.0
		for _, p := range pts {
			var a agg
			a.add(p)
			maxPoint = math.Max(maxPoint, g.value(a))
		}
		title := g.label + "  last -"
		if len(pts) > 0 {
			var last agg
			last.add(pts[len(pts)-1])
			title = g.label + "  last " + g.unit(g.value(last))
			if g.delta != nil {
				n, _ := g.delta(pts[len(pts)-1])
				title += " (+" + strconv.FormatUint(n, 10) + ")"
			}
			if m := "  max " + g.unit(maxPoint); len([]rune(title+m)) <= width {
				title += m
			}
		}
		out = append(out, title)
		out = append(out, sparkRows(vals, peak, width, height, v.ascii)...)
	}
	return append(out, axisLine(pts, cols, width))
}

// sparkRows draws vals (one per column, right-aligned) as bars height rows
// tall scaled to peak, with eighth-block characters, or five ASCII levels.
// A non-zero value always shows, however small beside the peak.
func sparkRows(vals []float64, peak float64, width, height int, ascii bool) []string {
	ramp := []rune(" ▁▂▃▄▅▆▇█")
	if ascii {
		ramp = []rune(" .-=#")
	}
	steps := len(ramp) - 1
	grid := make([][]rune, height)
	for r := range grid {
		grid[r] = []rune(strings.Repeat(" ", width))
	}
	off := width - len(vals)
	for i, x := range vals {
		if x <= 0 || peak <= 0 || off+i < 0 {
			continue
		}
		lv := max(int(math.Round(x/peak*float64(height*steps))), 1)
		for r := 0; r < height; r++ { // r = 0 is the bottom row
			grid[height-1-r][off+i] = ramp[min(max(lv-r*steps, 0), steps)]
		}
	}
	out := make([]string, height)
	for r := range grid {
		out[r] = string(grid[r])
	}
	return out
}

// axisLine marks the time the graphs span: how long ago the first column
// starts, and now at the right.
func axisLine(pts []history.Point, cols []agg, width int) string {
	if len(pts) == 0 {
		return ""
	}
	span := pts[len(pts)-1].Time.Sub(pts[0].Time) + pts[0].Interval
	l := "-" + span.Round(time.Second).String()
	if span < time.Second {
		l = "-" + span.Round(time.Millisecond).String()
	}
	per := time.Duration(float64(span) / float64(len(cols)))
	if per >= time.Second {
		per = per.Round(100 * time.Millisecond)
	} else {
		per = per.Round(time.Millisecond)
	}
	mid := fmt.Sprintf(" 1 column = %s ", per)
	pad := width - len(l) - len(mid) - len("now")
	if pad < 2 {
		return padRunes(l, width-3) + "now"
	}
	return l + strings.Repeat(" ", pad/2) + mid + strings.Repeat(" ", pad-pad/2) + "now"
}

// factLines are the program's facts for the column beside the graphs.
func (v *topView) factLines() []string {
	p := v.detail.prog
	if p == nil {
		return []string{fmt.Sprintf("program %d: no facts seen", v.detail.id)}
	}
	kv := func(k, val string) string { return fmt.Sprintf("%-9s %s", k, val) }
	sleepable := "unknown"
	if p.Sleepable != nil {
		sleepable = map[bool]string{true: "yes", false: "no"}[*p.Sleepable]
	}
	misses := countCell(p.RecursionMisses)
	linkMissed := "n/a"
	var lm uint64
	for _, l := range p.Links {
		if l.Missed != nil {
			lm += *l.Missed
			linkMissed = strconv.FormatUint(lm, 10)
		}
	}
	loaded := "-"
	if !p.LoadTime.IsZero() {
		loaded = p.LoadTime.Local().Format("Jan 2 15:04:05")
	}
	out := []string{
		kv("id", strconv.FormatUint(uint64(p.ID), 10)),
		kv("name", p.Name),
		kv("tag", orDash(p.Tag)),
		kv("type", p.Type),
		kv("attach", p.AttachType),
		kv("target", orDash(p.AttachTarget)),
		kv("sleepable", sleepable),
		kv("miss kind", orDash(p.MissKind)),
		kv("loaded", loaded),
		kv("runs", strconv.FormatUint(p.RunCount, 10)),
		kv("memory", fmtBytes(agent.ProgramMemory(&p.Program))),
		kv("misses", misses),
		kv("causes", causesCell(p)),
		kv("link miss", linkMissed),
	}
	if len(p.Owners) == 0 {
		out = append(out, kv("owner", "-"))
	}
	for i, o := range p.Owners {
		if i == 2 {
			out = append(out, kv("", fmt.Sprintf("+%d more owners", len(p.Owners)-2)))
			break
		}
		out = append(out, kv("owner", fmt.Sprintf("pid %d %s", o.PID, o.Comm)))
		if o.ContainerID != "" {
			out = append(out, kv(" → ctr", strings.TrimSpace(trunc(o.ContainerID, 12)+" "+o.Runtime)))
		}
		switch {
		case o.PodName != "":
			out = append(out, kv(" → pod", o.PodNamespace+"/"+o.PodName))
		case o.PodUID != "":
			out = append(out, kv(" → pod", "uid "+o.PodUID))
		}
	}
	if len(p.Links) == 0 {
		out = append(out, kv("links", "-"))
	}
	for i, l := range p.Links {
		if i == 3 {
			out = append(out, kv("", fmt.Sprintf("+%d more links", len(p.Links)-3)))
			break
		}
		k := ""
		if i == 0 {
			k = "links"
		}
		out = append(out, kv(k, fmt.Sprintf("%d %s", l.ID, l.Type)))
		if l.Missed != nil {
			out = append(out, kv("", "  missed "+strconv.FormatUint(*l.Missed, 10)))
		}
	}
	for i := range out {
		out[i] = padRunes(out[i], factsWidth)
	}
	return out
}

// mapLines are the program's maps, one line each with its fullness bar,
// under a header with their memory (each map once), in at most room lines.
func (v *topView) mapLines(s *agent.Snapshot, room int) []string {
	p := v.detail.prog
	if p == nil || room < 1 {
		return nil
	}
	switch {
	case len(p.MapIDs) == 0:
		return []string{"maps: none"}
	case s.MapScan.Error != "":
		return []string{"maps: " + s.MapScan.Error}
	case s.MapScan.Source == "":
		return []string{fmt.Sprintf("maps: %d, not read (--no-maps)", len(p.MapIDs))}
	}
	byID := make(map[uint32]*agent.Map, len(p.MapIDs))
	for _, id := range p.MapIDs {
		if i, ok := slices.BinarySearchFunc(s.Maps, id, func(m *agent.Map, id uint32) int { return cmp.Compare(m.ID, id) }); ok {
			byID[id] = s.Maps[i]
		}
	}
	out := []string{fmt.Sprintf("%-17s %-10s %13s %-15s %9s", fmt.Sprintf("MAPS (%d)", len(p.MapIDs)), "TYPE", "ENTRIES/MAX", "FULL",
		fmtBytes(agent.MapMemory(byID, p.MapIDs)))}
	for i, id := range p.MapIDs {
		if len(out) == room {
			if room > 1 { // the header stays
				out[room-1] = fmt.Sprintf("  +%d more maps (bpfleet maps --prog %d)", len(p.MapIDs)-i+1, p.ID)
			}
			break
		}
		m := byID[id]
		if m == nil {
			out = append(out, fmt.Sprintf("  %d: gone since the scan", id))
			continue
		}
		entries := "-"
		if m.Entries != nil {
			entries = strconv.FormatUint(*m.Entries, 10)
		}
		mem := "?"
		if m.MemoryBytes != nil {
			mem = fmtBytes(*m.MemoryBytes)
		}
		out = append(out, fmt.Sprintf("  %-15s %-10s %13s %-15s %9s", trunc(m.Name, 15), trunc(m.Type, 10),
			entries+"/"+strconv.FormatUint(uint64(m.MaxEntries), 10), fullBar(m.Fullness, 10, v.ascii), mem))
	}
	return out
}

// episodeLines describe the program's open miss episodes (two lines at
// most), or say there is none.
func (v *topView) episodeLines(s *agent.Snapshot) []string {
	var out []string
	for _, e := range s.Episodes {
		if e.ProgID != v.detail.id || !e.Open {
			continue
		}
		if len(out) == 2 {
			break
		}
		what := "miss episode"
		if e.Source == agent.SourceLinkMissed {
			what = fmt.Sprintf("link %d missed episode", e.LinkID)
		}
		out = append(out, fmt.Sprintf("open %s since %s (%s): %d misses in %d runs, peak %s/s",
			what, e.Start.Local().Format("15:04:05"), e.End.Sub(e.Start).Round(time.Second), e.Misses, e.Runs, fmtRate(e.PeakRate)))
	}
	if len(out) == 0 {
		out = append(out, "no open miss episode")
	}
	return out
}

// padRunes cuts or pads s to exactly n runes.
func padRunes(s string, n int) string {
	r := []rune(s)
	if len(r) >= n {
		return string(r[:max(n, 0)])
	}
	return s + strings.Repeat(" ", n-len(r))
}

// causesCell is the facts column's causes: the explained ones short
// (r recursion, i interrupt, p preempted, n nested) and u unexplained.
func causesCell(p *agent.ProgramStat) string {
	if p.RecursionMisses == nil {
		return "n/a"
	}
	c := agent.ProgramCauses(p)
	short := agent.ShortCauses(c)
	switch {
	case short == "" && c.Unexplained == 0:
		return "-"
	case short == "":
		return "all unexplained"
	case c.Unexplained > 0:
		return short + " u" + strconv.FormatUint(c.Unexplained, 10)
	}
	return short
}

// missLines show the program's last sampled misses: when, where, why, who,
// and the stack innermost first on one line, cut to the screen's width.
func (v *topView) missLines(width, room int) []string {
	d := &v.detail
	if len(d.recent) == 0 || room < 3 {
		return nil
	}
	arrow := " ← "
	if v.ascii {
		arrow = " <- "
	}
	cut := func(s string) string { return strings.TrimRight(padRunes(s, max(width, 0)), " ") }
	out := []string{cut(fmt.Sprintf("last sampled misses (bpfleet misses %d shows each):", d.id))}
	for i := len(d.recent) - 1; i >= 0 && len(out)+2 <= room; i-- {
		m := &d.recent[i]
		who := taskName(m)
		if pod := podName(m); pod != "-" {
			who += " " + pod
		}
		out = append(out, cut(fmt.Sprintf("%s cpu%d %s %s %s", m.Time.Local().Format("15:04:05"), m.CPU, m.Context, m.Cause, who)),
			cut("  "+strings.Join(m.Stack, arrow)))
	}
	return out
}
