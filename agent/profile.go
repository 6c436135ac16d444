package agent

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bpfleet/bpfleet/probes/profiler"
)

func matchOwner(p *Program, v string) bool {
	for _, o := range p.Owners {
		if o.Comm == v || o.ContainerID == v || (len(v) >= 12 && strings.HasPrefix(o.ContainerID, v)) || o.PodName == v {
			return true
		}
	}
	return false
}

// profileMatch reports whether a selector picks p.
func profileMatch(sels []string, p *Program) bool {
	for _, s := range sels {
		k, v, ok := strings.Cut(s, ":")
		if !ok {
			if s == strconv.FormatUint(uint64(p.ID), 10) || s == p.Name || s == p.Tag || s == p.AttachType || matchOwner(p, s) {
				return true
			}
			continue
		}
		switch {
		case k == "id" && v == strconv.FormatUint(uint64(p.ID), 10),
			k == "name" && v == p.Name,
			k == "tag" && v == p.Tag,
			k == "attach" && v == p.AttachType,
			k == "owner" && matchOwner(p, v):
			return true
		}
	}
	return false
}

// profiles holds the agent's profilers, one per selected program.
type profiles struct {
	sels   []string
	opts   profiler.Options
	timing string
	active map[uint32]*profiled
	failed map[uint32]string
	own    map[uint32]bool // the profilers' own programs

	// Windowed timing: the timing programs are attached for window of
	// every period by a goroutine of their own; mu guards active and on.
	mu   sync.Mutex
	on   bool
	stop chan struct{}
	done chan struct{}
}

type profiled struct {
	p    *profiler.Profiler
	prev profiler.Histogram
}

// newProfiles starts the profiles; with window > 0 each selected program
// is timed only for window of every period (a counting fentry stays
// attached: runs stay exact), which is what makes profiling cheaper per
// run than stats (see METRICS.md).
func newProfiles(sels []string, window, period time.Duration) *profiles {
	pr := &profiles{sels: sels, timing: "every run", active: map[uint32]*profiled{}, failed: map[uint32]string{}, own: map[uint32]bool{}}
	if window > 0 && period > window {
		pr.opts.Windowed = true
		pr.timing = fmt.Sprintf("windows %v of %v", window, period)
		pr.stop, pr.done = make(chan struct{}), make(chan struct{})
		go pr.windows(window, period)
	}
	return pr
}

// windows attaches the timing programs for window, detaches them for
// period-window, until close. Each switch rewrites each target's
// trampoline: twice a period, never per run.
func (pr *profiles) windows(window, period time.Duration) {
	defer close(pr.done)
	for {
		pr.setTiming(true)
		select {
		case <-pr.stop:
			return
		case <-time.After(window):
		}
		pr.setTiming(false)
		select {
		case <-pr.stop:
			return
		case <-time.After(period - window):
		}
	}
}

func (pr *profiles) setTiming(on bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.on = on
	for id, a := range pr.active {
		if err := a.p.SetTiming(on); err != nil {
			// The next scan reports it: the profile stays, untimed.
			pr.failed[id] = fmt.Sprintf("cannot time program %d: %v", id, err)
		}
	}
}

// update attaches to newly selected programs, reads the others and drops
// the vanished; it sets the Profile of every selected program's entry, the
// one writable(i) returns for ps[i] (a snapshot's entries may be shared with
// earlier snapshots, which must not change).
func (pr *profiles) update(ps []*ProgramStat, writable func(i int) *ProgramStat) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	present := make(map[uint32]bool, len(ps))
	for i := range ps {
		p := ps[i]
		present[p.ID] = true
		if pr.own[p.ID] || !profileMatch(pr.sels, &p.Program) {
			continue
		}
		p = writable(i)
		if msg, bad := pr.failed[p.ID]; bad {
			p.Profile = &ProfileStat{Error: msg}
			continue
		}
		a := pr.active[p.ID]
		if a == nil {
			prof, err := profiler.AttachID(p.ID, pr.opts)
			if err != nil {
				msg := fmt.Sprintf("cannot profile program %d (%s): %v", p.ID, p.Name, err)
				pr.failed[p.ID] = msg
				p.Profile = &ProfileStat{Error: msg}
				continue
			}
			for _, id := range prof.ProgramIDs() {
				pr.own[id] = true
			}
			if pr.opts.Windowed && pr.on {
				if err := prof.SetTiming(true); err != nil {
					p.Profile = &ProfileStat{Error: fmt.Sprintf("cannot time program %d (%s): %v", p.ID, p.Name, err)}
				}
			}
			a = &profiled{p: prof}
			pr.active[p.ID] = a
		}
		h, err := a.p.Read()
		if err != nil {
			p.Profile = &ProfileStat{Error: err.Error()}
			continue
		}
		d := h.Sub(a.prev)
		a.prev = h
		st := &ProfileStat{Func: a.p.Target.Func, Shape: string(a.p.Shape), Timing: pr.timing, TimedRuns: h.Timed, Buckets: append([]uint64(nil), h.Buckets[:]...), Runs: h.Count, SumNs: h.SumNs, MaxNs: h.MaxNs,
			IntervalRuns: d.Count, P50Ns: d.Quantile(0.5), P90Ns: d.Quantile(0.9), P99Ns: d.Quantile(0.99)}
		st.MeanNs = d.MeanNs()
		p.Profile = st
	}
	for id, a := range pr.active {
		if !present[id] {
			for _, own := range a.p.ProgramIDs() {
				delete(pr.own, own)
			}
			a.p.Close()
			delete(pr.active, id)
		}
	}
	for id := range pr.failed {
		if !present[id] {
			delete(pr.failed, id)
		}
	}
}

// errors lists one line per selected program that cannot be profiled.
func (pr *profiles) errors() []string {
	var out []string
	for _, msg := range pr.failed {
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

func (pr *profiles) close() {
	if pr.stop != nil {
		close(pr.stop)
		<-pr.done
		pr.stop = nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for id, a := range pr.active {
		a.p.Close()
		delete(pr.active, id)
	}
}
