package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/creack/pty"
)

// ptyTop runs bpfleet with args in a rows×cols pseudo-terminal and returns
// its screen and terminal; it is killed when the test ends.
func ptyTop(t *testing.T, rows, cols uint16, env []string, args ...string) (*screen, *os.File, <-chan error) {
	t.Helper()
	cmd := exec.Command(bpfleetBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	scr := &screen{}
	go func() { _, _ = copyAll(scr, tty) }()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited; tty.Close() })
	return scr, tty, exited
}

func press(t *testing.T, tty *os.File, keys string) {
	t.Helper()
	if _, err := tty.Write([]byte(keys)); err != nil {
		t.Fatal(err)
	}
}

// listRow is the list row of program id, however narrow the screen.
func listRow(frame string, id uint32) []string {
	for _, l := range strings.Split(frame, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == strconv.FormatUint(uint64(id), 10) {
			return f
		}
	}
	return nil
}

// selectAndOpen moves the selection to program id's row of the list and
// opens its detail view.
func selectAndOpen(t *testing.T, scr *screen, tty *os.File, id uint32) string {
	t.Helper()
	frame := scr.waitFor(t, "the list with the canary", func(f string) bool { return listRow(f, id) != nil })
	idx := -1
	n := 0
	for _, l := range strings.Split(frame, "\n") {
		f := strings.Fields(l)
		if len(f) > 3 {
			if _, err := strconv.ParseUint(f[0], 10, 32); err == nil {
				if f[0] == strconv.FormatUint(uint64(id), 10) {
					idx = n
				}
				n++
			}
		}
	}
	press(t, tty, "g"+strings.Repeat("j", idx)+"\r")
	return scr.waitFor(t, "the canary's detail view", func(f string) bool { return isDetail(f, id) })
}

func isDetail(frame string, id uint32) bool {
	return strings.Contains(frame, "— program "+strconv.FormatUint(uint64(id), 10)+" ") ||
		strings.Contains(frame, "- program "+strconv.FormatUint(uint64(id), 10)+" ")
}

var (
	missesLast  = regexp.MustCompile(`misses/s \([^)]*\)  last \S+ \(\+(\d+)\)`)
	missesTotal = regexp.MustCompile(`\smisses +(\d+)\s*$`)
	unloadedAt  = regexp.MustCompile(`program (\d+) unloaded at \d\d:\d\d:\d\d`)
)

// detailMisses reads the misses graph's newest point (its counter delta)
// and the cumulative count from the facts, both of one scan.
func detailMisses(frame string) (last, total uint64, ok bool) {
	var haveLast, haveTotal bool
	for _, l := range strings.Split(frame, "\n") {
		if m := missesLast.FindStringSubmatch(l); m != nil {
			last, _ = strconv.ParseUint(m[1], 10, 64)
			haveLast = true
		}
		if m := missesTotal.FindStringSubmatch(l); m != nil {
			total, _ = strconv.ParseUint(m[1], 10, 64)
			haveTotal = true
		}
	}
	return last, total, haveLast && haveTotal
}

// checkFits fails when a frame has more lines or wider lines than the
// terminal: either would wrap or scroll it.
func checkFits(t *testing.T, what, frame string, rows, cols int) {
	t.Helper()
	lines := strings.Split(frame, "\n")
	if len(lines) > rows {
		t.Errorf("%s: %d lines on a %d-row terminal:\n%s", what, len(lines), rows, frame)
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > cols {
			t.Errorf("%s: line %d is %d columns wide on a %d-column terminal: %q", what, i+1, n, cols, l)
		}
	}
}

// triggerLoop fires the canary until the returned stop is called.
func triggerLoop(c *canary.Canary) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				c.Trigger(5)
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// TestTopDetailInPty drives the real `bpfleet top` on an 80×24 terminal:
// the canary's detail view shows its misses rising while it is triggered,
// the misses graph's newest point equals the kernel counter's growth over
// that interval, Esc returns to the list, a resize redraws at once, and
// unloading the canary while its view is open says so.
func TestTopDetailInPty(t *testing.T) {
	c, id := canarytest.Load(t)
	stop := triggerLoop(c)
	defer stop() // before the canary's cleanup closes it

	scr, tty, exited := ptyTop(t, 24, 80, []string{"LC_ALL=C.UTF-8"}, "top", "--interval", "300ms", "--filter", "canary")
	list := scr.waitFor(t, "the canary in the list", func(f string) bool { return listRow(f, id) != nil })
	checkFits(t, "list", list, 24, 80)
	t.Logf("list:\n%s", list)
	if !strings.Contains(list, "Enter/d detail") || !strings.Contains(list, "select") {
		t.Errorf("the list's key line does not show the detail and select keys:\n%s", list)
	}

	frame := selectAndOpen(t, scr, tty, id)
	checkFits(t, "detail view", frame, 24, 80)
	for _, want := range []string{"runs/s", "ns/run", "CPU %", "link missed/s", "tp_btf", "bpf_trace_printk", "sleepable"} {
		if !strings.Contains(frame, want) {
			t.Errorf("detail view lacks %q:\n%s", want, frame)
		}
	}
	// The owner chain starts at this test process, which holds the canary.
	if !regexp.MustCompile(`owner +pid ` + strconv.Itoa(os.Getpid()) + ` `).MatchString(frame) {
		t.Errorf("the facts do not name this process (pid %d) as the canary's owner:\n%s", os.Getpid(), frame)
	}
	// The misses graph names the kind the facts give for this kernel.
	if m := regexp.MustCompile(`miss kind (\S+)`).FindStringSubmatch(frame); m == nil || !strings.Contains(frame, "misses/s ("+m[1]+")") {
		t.Errorf("the misses graph does not name the program's miss kind:\n%s", frame)
	}

	// Misses rise while the canary is triggered.
	var first uint64
	scr.waitFor(t, "the canary missing in its detail view", func(f string) bool {
		last, total, ok := detailMisses(f)
		first = total
		return ok && last > 0 && total > 0
	})
	frame = scr.waitFor(t, "the canary's miss count rising", func(f string) bool {
		last, total, ok := detailMisses(f)
		return ok && last > 0 && total > first
	})
	t.Logf("detail view while missing:\n%s", frame)
	if !strings.Contains(frame, "open miss episode since") {
		t.Errorf("the canary is missing but its view shows no open episode:\n%s", frame)
	}
	checkFits(t, "detail view with graphs", frame, 24, 80)

	// The newest point is the kernel's own count over that interval. The
	// burst takes well under a millisecond; should a 300ms scan still fall
	// inside it, the point holds part of it and the next burst is tried.
	stop()
	const burst = 23
	exact := false
	for attempt := 0; attempt < 3 && !exact; attempt++ {
		k0, err := c.KernelMisses()
		if err != nil {
			t.Fatal(err)
		}
		scr.waitFor(t, "the view settled on the kernel's count", func(f string) bool {
			last, total, ok := detailMisses(f)
			return ok && last == 0 && total == k0
		})
		mark := len(scr.all())
		if err := c.Trigger(burst); err != nil {
			t.Fatal(err)
		}
		k1, err := c.KernelMisses()
		if err != nil {
			t.Fatal(err)
		}
		// The first frame that counts the burst: on a busy machine the
		// latest frame may already be a later, quiet interval.
		scr.waitFor(t, "the burst counted", func(string) bool {
			frame = ""
			for _, f := range scr.framesSince(mark) {
				if _, total, ok := detailMisses(f); ok && total == k1 {
					frame = f
					return true
				}
			}
			return false
		})
		last, _, _ := detailMisses(frame)
		switch {
		case last == k1-k0:
			exact = true
		case last > k1-k0 || last == 0:
			t.Fatalf("newest point of the misses graph is +%d, the kernel counted %d (%d → %d):\n%s", last, k1-k0, k0, k1, frame)
		default:
			t.Logf("a scan fell inside the burst (+%d of %d); again", last, k1-k0)
		}
	}
	if !exact {
		t.Fatal("three bursts in a row were split by a scan")
	}

	press(t, tty, "\x1b")
	list = scr.waitFor(t, "the list after Esc", func(f string) bool { return !isDetail(f, id) && listRow(f, id) != nil })
	checkFits(t, "list after Esc", list, 24, 80)

	// A resize redraws at once, at the new size.
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 30, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	scr.waitFor(t, "a redraw at 120 columns", func(f string) bool {
		for _, l := range strings.Split(f, "\n") {
			if utf8.RuneCountInString(l) > 80 {
				return true
			}
		}
		return false
	})
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}

	press(t, tty, "\r")
	scr.waitFor(t, "the detail view again", func(f string) bool { return isDetail(f, id) })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	frame = scr.waitFor(t, "the canary reported unloaded", func(f string) bool {
		m := unloadedAt.FindStringSubmatch(f)
		return m != nil && m[1] == strconv.FormatUint(uint64(id), 10)
	})
	checkFits(t, "unloaded view", frame, 24, 80)
	t.Logf("after the unload:\n%s", frame)
	// Still live: the screen keeps redrawing after the unload.
	n := strings.Count(scr.all(), "\x1b[H\x1b[2J")
	scr.waitFor(t, "frames after the unload", func(string) bool { return strings.Count(scr.all(), "\x1b[H\x1b[2J") > n+1 })

	press(t, tty, "q")
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("top exited with %v after q", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("top did not quit on q")
	}
}

// framesSince returns the frames drawn after byte offset off, without
// escapes, oldest first.
func (s *screen) framesSince(off int) []string {
	var out []string
	for _, f := range strings.Split(s.all()[off:], "\x1b[H\x1b[2J") {
		out = append(out, strings.ReplaceAll(ansi.ReplaceAllString(f, ""), "\r", ""))
	}
	return out
}

func (s *screen) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestTopDetailASCII: with --ascii every byte top writes is ASCII, graphs
// included, and the frame still fits 80×24.
func TestTopDetailASCII(t *testing.T) {
	c, id := canarytest.Load(t)
	stop := triggerLoop(c)
	defer stop()
	scr, tty, _ := ptyTop(t, 24, 80, []string{"LC_ALL=C.UTF-8"}, "top", "--interval", "200ms", "--no-owners", "--filter", "canary", "--ascii")
	selectAndOpen(t, scr, tty, id)
	frame := scr.waitFor(t, "a graph with bars", func(f string) bool {
		last, _, ok := detailMisses(f)
		return ok && last > 0 && strings.Contains(f, "#")
	})
	checkFits(t, "ascii detail view", frame, 24, 80)
	t.Logf("ascii detail view:\n%s", frame)
	if i := bytes.IndexFunc([]byte(scr.all()), func(r rune) bool { return r >= utf8.RuneSelf }); i >= 0 {
		out := scr.all()
		t.Errorf("--ascii output has a non-ASCII byte at %d: %q", i, out[max(i-40, 0):min(i+40, len(out))])
	}
}

// TestTopRemoteDetail: top --remote opens the detail view of a program
// with the history a served agent keeps (real scans, in-process), and
// shows the canary's misses from it.
func TestTopRemoteDetail(t *testing.T) {
	c, id := canarytest.Load(t)
	addr, tokenFile := serveAgent(t, c, 100*time.Millisecond, history.New(history.Capacity(history.Window, 100*time.Millisecond)))

	scr, tty, _ := ptyTop(t, 24, 80, []string{"LC_ALL=C.UTF-8"}, "top", "--remote", "http://"+addr, "--token-file", tokenFile,
		"--interval", "200ms", "--filter", "canary")
	selectAndOpen(t, scr, tty, id)
	frame := scr.waitFor(t, "the agent's history of the canary", func(f string) bool {
		last, total, ok := detailMisses(f)
		return ok && last > 0 && total > 0 && strings.Contains(f, "history: last")
	})
	checkFits(t, "remote detail view", frame, 24, 80)
	t.Logf("remote detail view:\n%s", frame)
	if strings.Contains(frame, "history: agent") {
		t.Errorf("remote history failed:\n%s", frame)
	}
}

// TestAgentServesHistory runs the real `bpfleet agent` and reads the
// canary's history from its API: every scan is recorded, so once the
// series' cumulative count reaches the kernel's, its points add up to it
// (the canary is untouched before the agent's first scan).
func TestAgentServesHistory(t *testing.T) {
	c, id := canarytest.Load(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bpfleetBin(t), "agent", "--api-addr", addr, "--interval", "500ms", "--calibrate=false", "--no-owners")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	base := "http://" + addr
	get := func(path string, v any) int {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if v != nil && resp.StatusCode == 200 {
			json.NewDecoder(resp.Body).Decode(v)
		}
		return resp.StatusCode
	}
	deadline := time.Now().Add(15 * time.Second)
	for get("/readyz", nil) != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("agent never ready:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 3 {
		if err := c.Trigger(20); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	want, err := c.KernelMisses()
	if err != nil {
		t.Fatal(err)
	}
	var s history.Series
	for {
		s = history.Series{}
		if code := get(fmt.Sprintf("/v1/programs/%d/history", id), &s); code == 200 && s.RecursionMissesTotal != nil && *s.RecursionMissesTotal == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history of the canary never reached the kernel's %d misses: %+v\n%s", want, s, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var sum uint64
	for _, p := range s.Points {
		if p.RecursionMisses != nil {
			sum += *p.RecursionMisses
		}
	}
	if sum != want || len(s.Points) < 2 || s.Capacity != history.Capacity(history.Window, 500*time.Millisecond) {
		t.Errorf("agent's history: %d points (capacity %d) adding up to %d misses, kernel counted %d", len(s.Points), s.Capacity, sum, want)
	}
	if code := get("/v1/programs/4294967295/history", nil); code != 404 {
		t.Errorf("history of an unknown program: %d, want 404", code)
	}
}

// TestTopMapsInPty: top's MEM column shows a program's own memory as the
// kernel reports it, and its detail view lists its maps with entries/max,
// the fullness bar and each map's memory (the kernel's figure), under
// their sum.
func TestTopMapsInPty(t *testing.T) {
	set := bpfmaps.New(t, "top_maps", 5, 10)
	info, err := set.Prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	jited, err := info.JitedSize()
	if err != nil {
		t.Fatal(err)
	}
	xlated, err := info.TranslatedSize()
	if err != nil {
		t.Fatal(err)
	}
	progMem := fmtBytes(uint64(jited) + bpfmaps.Memlock(t, set.Prog.FD())) // memlock holds the instructions
	var sum uint64
	for _, m := range set.Maps() {
		sum += bpfmaps.Memlock(t, m.FD())
	}

	scr, tty, _ := ptyTop(t, 30, 100, []string{"LC_ALL=C.UTF-8"}, "top", "--interval", "300ms", "--filter", "top_maps")
	list := scr.waitFor(t, "the test's program in the list", func(f string) bool { return listRow(f, set.ProgID) != nil })
	if row := strings.Join(listRow(list, set.ProgID), " "); !strings.HasSuffix(row, " "+progMem) {
		t.Errorf("program %d row %q does not end in its memory %s (jited %d + memlock; xlated %d inside it):\n%s", set.ProgID, row, progMem, jited, xlated, list)
	}
	selectAndOpen(t, scr, tty, set.ProgID)
	hashLine := regexp.MustCompile(`top_maps_h +hash +5/10 +█████░░░░░ 50% +` + regexp.QuoteMeta(fmtBytes(bpfmaps.Memlock(t, set.Hash.FD()))))
	frame := scr.waitFor(t, "the maps in the detail view", func(f string) bool { return hashLine.MatchString(f) })
	checkFits(t, "detail view with maps", frame, 30, 100)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`MAPS \(3\) .* ` + regexp.QuoteMeta(fmtBytes(sum))),
		regexp.MustCompile(`top_maps_a +array +-/16 +- +` + regexp.QuoteMeta(fmtBytes(bpfmaps.Memlock(t, set.Array.FD())))),
		regexp.MustCompile(`top_maps_r +ringbuf +-/65536 +- +` + regexp.QuoteMeta(fmtBytes(bpfmaps.Memlock(t, set.RingBuf.FD())))),
		regexp.MustCompile(`memory +` + regexp.QuoteMeta(progMem)),
	} {
		if !want.MatchString(frame) {
			t.Errorf("detail view lacks %s:\n%s", want, frame)
		}
	}
}
