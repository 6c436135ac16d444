package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
)

// top's state and every change to it: keys, the selection, the sort and
// filter, the open detail view and its history. Drawing (topview.go,
// topdetail.go) reads this state and changes none of it.

// topView is top's state between frames: sort, filter, and the key-entry
// mode. show brings it up to each snapshot; drawing is then a function of
// the view and the snapshot.
type topView struct {
	sortIdx int
	reverse bool
	filter  string
	editing bool
	editBuf string
	status  string
	// ascii draws with ASCII only, for terminals without UTF-8.
	ascii bool

	// Selection: the selected program's id (it follows the program when
	// the order changes), its row index as a fallback when it vanishes, the
	// first row shown, and the ids in display order at the last frame.
	selected uint32
	selIdx   int
	offset   int
	ids      []uint32
	shown    *agent.Snapshot // the last frame's

	// detail is the program whose detail view is open, 0 in the list.
	detail detailState
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

// Keys beyond a byte: escape sequences the key reader decodes.
const (
	keyEsc = 0x100 + iota
	keyUp
	keyDown
	keyPgUp
	keyPgDn
	keyHome
	keyEnd
)

// key handles one key press (a byte or one of the key* codes) and reports
// whether top should quit.
func (v *topView) key(k int) (quit bool) {
	if v.editing {
		switch k {
		case '\r', '\n':
			v.filter, v.editing = v.editBuf, false
		case keyEsc:
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
	if k == 'q' || k == 3 { // q, Ctrl-C
		return true
	}
	if v.detail.id != 0 {
		switch k {
		case keyEsc, 'd', 127, 8:
			v.closeDetail()
		case keyUp, 'k':
			v.move(-1)
			v.openDetail()
		case keyDown, 'j':
			v.move(1)
			v.openDetail()
		}
		return false
	}
	switch k {
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
	case keyEsc:
		v.filter = ""
	case keyUp, 'k':
		v.move(-1)
	case keyDown, 'j':
		v.move(1)
	case keyPgUp:
		v.move(-10)
	case keyPgDn:
		v.move(10)
	case keyHome, 'g':
		v.move(-len(v.ids))
	case keyEnd, 'G':
		v.move(len(v.ids))
	case '\r', '\n', 'd':
		v.openDetail()
	}
	return false
}

// move shifts the selection by n rows of the last frame's order.
func (v *topView) move(n int) {
	if len(v.ids) == 0 {
		return
	}
	i := v.selIdx + n
	if i < 0 {
		i = 0
	}
	if i >= len(v.ids) {
		i = len(v.ids) - 1
	}
	v.selIdx, v.selected = i, v.ids[i]
}

// selectIn finds the selected program in this frame's rows: by id while it
// is there, else the row now at its old index (it vanished or was filtered).
func (v *topView) selectIn(progs []*agent.ProgramStat) {
	v.ids = v.ids[:0]
	for _, p := range progs {
		v.ids = append(v.ids, p.ID)
	}
	if len(v.ids) == 0 {
		v.selIdx, v.selected = 0, 0
		return
	}
	for i, id := range v.ids {
		if id == v.selected {
			v.selIdx = i
			return
		}
	}
	v.selIdx = min(max(v.selIdx, 0), len(v.ids)-1)
	v.selected = v.ids[v.selIdx]
}

// listPlan is what show decided for one frame of the list.
type listPlan struct {
	layout listLayout
	panel  []string             // the attach-type and profile panel
	progs  []*agent.ProgramStat // the rows, in display order
	room   int                  // program rows shown
	more   bool                 // a "… N more" line follows them
}

// show brings the view up to s for a rows×cols frame: the snapshot shown;
// in the list the rows' order, the selection and the first row shown; in
// the detail view the program's facts and misses.
func (v *topView) show(s *agent.Snapshot, rows, cols int) listPlan {
	v.shown = s
	if v.detail.id != 0 {
		v.detail.see(s)
		return listPlan{}
	}
	sc := listPlan{layout: layoutWide, panel: append(v.attachPanel(s), profilePanel(s)...)}
	sc.room = max(rows-4-len(sc.panel), 1)
	if cols < fullWidth {
		sc.layout = layoutNarrow
	}
	sc.progs = v.rows(s)
	v.selectIn(sc.progs)
	sc.more = len(sc.progs) > sc.room
	if sc.more {
		sc.room-- // the "… N more" line
	}
	if v.selIdx < v.offset {
		v.offset = v.selIdx
	}
	if v.selIdx >= v.offset+sc.room {
		v.offset = v.selIdx - sc.room + 1
	}
	v.offset = max(min(v.offset, len(sc.progs)-sc.room), 0)
	return sc
}

// detailState is the open detail view: the program, the facts it had when
// last seen (kept after it is unloaded, so the view can still show them),
// its history, and when it was found unloaded.
type detailState struct {
	id       uint32
	prog     *agent.ProgramStat
	series   *history.Series
	err      string // why the history could not be read
	unloaded time.Time
	gone     bool // not in the last snapshot shown
	// recent are the program's last sampled misses (newest last, at most
	// maxDetailMisses), from the snapshots seen while the view is open;
	// seenSeq the last snapshot taken from (a redraw takes none again).
	recent  []agent.MissSample
	seenSeq uint64
}

// maxDetailMisses is how many sampled misses the detail view keeps and shows.
const maxDetailMisses = 2

// openDetail opens the selected program's view, with its facts from the
// last frame: should it be unloaded before the next scan, the view still
// says what it was.
func (v *topView) openDetail() {
	if v.selected == 0 || v.selected == v.detail.id {
		return
	}
	v.detail = detailState{id: v.selected}
	if s := v.shown; s != nil {
		for i := range s.Programs {
			if s.Programs[i].ID == v.selected {
				p := *s.Programs[i]
				v.detail.prog = &p
			}
		}
	}
}

func (v *topView) closeDetail() { v.detail = detailState{} }

// setHistory stores the latest history read for the open view.
func (v *topView) setHistory(s *history.Series, err error) {
	v.detail.series, v.detail.err = s, ""
	if err != nil {
		v.detail.err = err.Error()
	}
}

// see brings the open view up to s: the program's facts while it is
// loaded, when it was found unloaded, its newest misses.
func (d *detailState) see(s *agent.Snapshot) {
	d.gone = true
	for i := range s.Programs {
		if s.Programs[i].ID == d.id {
			p := *s.Programs[i]
			d.prog, d.unloaded, d.gone = &p, time.Time{}, false
		}
	}
	d.takeMisses(s)
	if d.gone && d.unloaded.IsZero() {
		d.unloaded = s.Time
		if d.series != nil && d.series.UnloadedAt != nil {
			d.unloaded = *d.series.UnloadedAt
		}
	}
}

// takeMisses keeps the program's newest sampled misses of s, once per
// snapshot.
func (d *detailState) takeMisses(s *agent.Snapshot) {
	if s.Seq != 0 && s.Seq == d.seenSeq {
		return
	}
	d.seenSeq = s.Seq
	for _, m := range s.Misses {
		if m.ProgID == d.id {
			d.recent = append(d.recent, m)
		}
	}
	if n := len(d.recent); n > maxDetailMisses {
		d.recent = append(d.recent[:0:0], d.recent[n-maxDetailMisses:]...)
	}
}
