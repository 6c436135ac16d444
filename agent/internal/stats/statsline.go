package stats

import "time"

// look is what one look at the kernel found about stats while the agent
// held no fd of its own (Ctl.statsOnLocked: a no-op program
// test-run): on (another holder, or the sysctl), off, or unknown (the look
// failed, or the agent's stats calibration, which switches stats itself,
// was running).
type look uint8

const (
	lookNone look = iota // no look yet
	lookOff
	lookOn
	lookUnknown
)

// statsEvent is one entry of a statsLine: the agent's fd opened or closed
// (look is lookNone, held the fd after it), or a look.
type statsEvent struct {
	t    time.Time
	look look
	held bool
}

// maxStatsEvents bounds a statsLine between two scans (about an hour of
// sampled mode's looks). An agent that stops scanning for that long loses
// the record: its next interval counts as unknown.
const maxStatsEvents = 4096

// statsLine records, between two scans, when the agent held its stats fd
// and what each look without it found. A scan takes it as a coverage,
// which says for any stretch of the interval how long the kernel counted
// runs: another holder is not seen directly, only by the looks, so between
// two looks that agree stats were as both said, and between two that
// disagree a holder came or went at some unknown moment.
type statsLine struct {
	from   time.Time // the last take
	held   bool      // at from
	last   look      // the last look at or before from
	events []statsEvent
	lost   bool // events were dropped since from
	// now: held and the last look after the events so far, what the next
	// take starts from.
	nowHeld bool
	nowLook look
}

func newStatsLine(now time.Time) *statsLine {
	return &statsLine{from: now}
}

func (l *statsLine) add(e statsEvent) {
	if e.look == lookNone {
		l.nowHeld = e.held
	} else {
		l.nowLook = e.look
	}
	if len(l.events) >= maxStatsEvents {
		l.events, l.lost = l.events[:0], true
	}
	if !l.lost {
		l.events = append(l.events, e)
	}
}

// take ends the record at now and starts the next one; the events are
// copied into buf (the caller's, reused from scan to scan).
func (l *statsLine) take(now time.Time, buf []statsEvent) coverage {
	c := coverage{from: l.from, to: now, held: l.held, last: l.last, events: append(buf[:0], l.events...), lost: l.lost}
	l.from, l.held, l.last, l.lost = now, l.nowHeld, l.nowLook, false
	l.events = l.events[:0]
	return c
}

// coverage is a statsLine's record of one scan interval, from the previous
// take to this one.
type coverage struct {
	from, to time.Time
	held     bool
	last     look
	events   []statsEvent
	lost     bool
}

// statsSpan splits a stretch of time by whether the kernel counted runs:
// held (the agent's fd was open), on (stats on without it: the looks on
// both sides said so), off (the looks on both sides said off) and unknown
// (they disagreed, or there was none).
type statsSpan struct {
	held, on, off, unknown time.Duration
}

// counted is how long the kernel counted runs.
func (s statsSpan) counted() time.Duration { return s.held + s.on }

// exact says the kernel counted every run of the stretch.
func (s statsSpan) exact() bool { return s.off == 0 && s.unknown == 0 && s.counted() > 0 }

// known says the stretch has no unknown part: its runs divided by its
// counted time is a rate.
func (s statsSpan) known() bool { return s.unknown == 0 }

// span splits [a, b], clipped to the coverage.
func (c coverage) span(a, b time.Time) statsSpan {
	if a.Before(c.from) {
		a = c.from
	}
	if b.After(c.to) {
		b = c.to
	}
	var s statsSpan
	if !a.Before(b) {
		return s
	}
	if c.lost {
		s.unknown = b.Sub(a)
		return s
	}
	// The stretch between two looks is a segment: its time with the fd
	// held is held, the rest is what both looks said (unknown when they
	// differ). The time after the last look is as it said.
	held, prev, cur := c.held, c.last, c.from
	var segHeld, segFree time.Duration
	piece := func(t time.Time) {
		if d := overlap(cur, t, a, b); held {
			segHeld += d
		} else {
			segFree += d
		}
		cur = t
	}
	closeSegment := func(next look) {
		s.held += segHeld
		switch {
		case prev == next && next == lookOn:
			s.on += segFree
		case prev == next && next == lookOff:
			s.off += segFree
		default:
			s.unknown += segFree
		}
		segHeld, segFree = 0, 0
	}
	for _, e := range c.events {
		piece(e.t)
		if e.look == lookNone {
			held = e.held
			continue
		}
		closeSegment(e.look)
		prev = e.look
	}
	piece(c.to)
	closeSegment(prev)
	return s
}

// overlap is the length of [s, e] ∩ [a, b].
func overlap(s, e, a, b time.Time) time.Duration {
	if s.Before(a) {
		s = a
	}
	if e.After(b) {
		e = b
	}
	if e.After(s) {
		return e.Sub(s)
	}
	return 0
}
