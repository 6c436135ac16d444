package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// snapshotSource yields one snapshot per call: a local scan, or a remote
// agent's API.
type snapshotSource func(ctx context.Context) (*agent.Snapshot, error)

// historySource yields one program's recent history: top's own store, or
// the remote agent's /v1/programs/{id}/history.
type historySource func(ctx context.Context, id uint32) (*history.Series, error)

func init() {
	var (
		c     config.Top
		ascii bool
		tax   bool
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of BPF programs sorted by CPU share, with misses highlighted",
		Long: `top shows every BPF program's per-interval cost and misses and its own
memory (MEM: memlock, which holds the instructions, and JIT image), refreshed every --interval,
with a per-attach-type panel.

Keys: q quit · ↑ ↓ (or j k) select a program · Enter or d open its detail
view · s next sort column · r reverse · c cpu · n runs/s · m misses · / filter
by name, type, attach type or target (Enter to apply, Esc to clear).

The detail view graphs the selected program over the last 5 minutes (at most
600 intervals): runs/s, ns/run, CPU share, recursion misses/s with their kind,
and kprobe link missed/s, beside its facts (tag, type, attach type and target,
sleepable, memory, owners: pid → container → pod, links), its maps (entries of
max, a fullness bar, memory: the kernel's figure) and its open miss episode.
Esc returns to the list. With --remote the history comes from the agent.
Graphs use Unicode block characters when LC_ALL, LC_CTYPE or LANG names
UTF-8, ASCII otherwise or with --ascii.

When stdout is not a terminal, top prints plain lines, one block per interval.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scanFlagsSet(cmd, &c.Scan)
			if err := c.Resolve(config.Env); err != nil {
				return err
			}
			every := c.Interval
			view := newTopView()
			if err := view.setSort(c.Sort); err != nil {
				return err
			}
			view.filter = c.Filter
			view.ascii = ascii || !utf8Locale()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			var src snapshotSource
			var hist historySource
			if c.Remote != "" {
				var err error
				if src, hist, err = remoteSources(c.Remote, c.Token); err != nil {
					return err
				}
			} else {
				cfg := agentConfig(c.Scan)
				cfg.StatsMode = agent.StatsAlways
				cfg.OwnerIterator = !c.Scan.NoIterator
				cfg.Profile = c.Profile
				a, err := newAgent(cfg)
				if err != nil {
					return err
				}
				defer a.Close()
				if tax {
					// Before the first scan: the measurement switches stats
					// off for a moment, which would spoil the first interval.
					measureTax(ctx, a, cmd.ErrOrStderr())
				}
				store := history.New(history.Capacity(history.Window, every))
				src = func(ctx context.Context) (*agent.Snapshot, error) {
					s, err := a.Scan(ctx)
					if err == nil {
						store.Record(s)
					}
					return s, err
				}
				hist = func(_ context.Context, id uint32) (*history.Series, error) {
					s, ok := store.Series(id)
					if !ok {
						return nil, fmt.Errorf("no history of program %d", id)
					}
					return &s, nil
				}
			}
			out := cmd.OutOrStdout()
			if f, ok := out.(*os.File); ok && isTerminal(f) && isTerminal(os.Stdin) {
				return runInteractive(ctx, src, hist, view, every, f, os.Stdin)
			}
			return runPlain(ctx, src, view, every, out, c.Count)
		},
	}
	registerScanFlags(cmd, &c.Scan)
	cmd.Flags().DurationVarP(&c.Interval, "interval", "i", time.Second, fmt.Sprintf("refresh interval (at least %v)", config.MinToolInterval))
	cmd.Flags().StringVar(&c.Remote, "remote", "", "read snapshots from a bpfleet agent's API at this URL instead of scanning locally")
	cmd.Flags().StringVar(&c.TokenFile, "token-file", "", "bearer token file for --remote (default $BPFLEET_API_TOKEN)")
	cmd.Flags().StringVar(&c.Sort, "sort", "cpu", "initial sort: "+strings.Join(config.TopSorts, ", "))
	cmd.Flags().StringVar(&c.Filter, "filter", "", "initial filter (substring of name, type, attach type or target)")
	cmd.Flags().IntVarP(&c.Count, "count", "n", 0, "plain output: stop after this many intervals (0: until interrupted)")
	cmd.Flags().BoolVar(&ascii, "ascii", false, "draw with ASCII only (the default when the locale is not UTF-8)")
	cmd.Flags().StringSliceVar(&c.Profile, "profile", nil, "programs to time with fentry/fexit and show with percentiles (as bpfleet profile PROG...)")
	cmd.Flags().BoolVar(&tax, "stats-tax", true, "first measure what BPF run-time stats cost per run here (under a second) and show the stats tax in the header")
	rootCmd.AddCommand(cmd)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// runPlain prints one block of lines per interval, for pipes and logs.
func runPlain(ctx context.Context, src snapshotSource, v *topView, every time.Duration, w io.Writer, count int) error {
	return everyInterval(ctx, src, every, count, true, func(s *agent.Snapshot) error {
		v.renderPlain(w, s)
		return nil
	})
}

// runInteractive draws the live screen in raw mode on the alternate screen
// and restores the terminal on every exit path.
func runInteractive(ctx context.Context, src snapshotSource, hist historySource, v *topView, every time.Duration, out, in *os.File) error {
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("reading terminal mode: %w", err)
	}
	raw := *old
	raw.Lflag &^= unix.ECHO | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Iflag &^= unix.IXON | unix.ICRNL
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return fmt.Errorf("setting terminal raw mode: %w", err)
	}
	fmt.Fprint(out, "\x1b[?1049h\x1b[?25l")
	defer func() {
		fmt.Fprint(out, "\x1b[?25h\x1b[?1049l")
		unix.IoctlSetTermios(fd, unix.TCSETS, old)
	}()

	keys := make(chan int, 16)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := in.Read(buf)
			if err != nil {
				close(keys)
				return
			}
			for _, k := range decodeKeys(buf[:n]) {
				keys <- k
			}
		}
	}()
	// A resized terminal is redrawn at once, not at the next interval.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	last, err := src(ctx)
	if err != nil {
		return err
	}
	// The open detail view reads its program's history after every scan
	// and when it opens, bounded by one interval so a slow agent cannot
	// stall the screen.
	loadHistory := func() {
		if v.detail.id == 0 {
			return
		}
		hctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		v.setHistory(hist(hctx, v.detail.id))
	}
	draw := func() {
		rows, cols := termSize(out)
		fmt.Fprint(out, v.renderScreen(last, rows, cols))
	}
	draw()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s, err := src(ctx)
			if err != nil {
				v.status = "scan failed: " + err.Error()
			} else {
				last, v.status = s, ""
			}
			loadHistory()
			draw()
		case <-winch:
			draw()
		case k, ok := <-keys:
			if !ok {
				return nil
			}
			open := v.detail.id
			if v.key(k) {
				return nil
			}
			if v.detail.id != open {
				loadHistory()
			}
			draw()
		}
	}
}

// decodeKeys splits one read from the terminal into keys: bytes as they
// are, and the escape sequences of arrows, paging and Home/End as key*
// codes. A lone Esc (or one not followed by a known sequence) is keyEsc.
func decodeKeys(b []byte) []int {
	var out []int
	for i := 0; i < len(b); i++ {
		if b[i] != 27 {
			out = append(out, int(b[i]))
			continue
		}
		if i+2 < len(b) && (b[i+1] == '[' || b[i+1] == 'O') {
			j := i + 2
			for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == ';') {
				j++
			}
			if j < len(b) {
				k := 0
				switch b[j] {
				case 'A':
					k = keyUp
				case 'B':
					k = keyDown
				case 'H':
					k = keyHome
				case 'F':
					k = keyEnd
				case '~':
					k = tildeKeys[string(b[i+2:j])]
				}
				if k != 0 {
					out = append(out, k)
				}
				i = j // an unknown sequence is dropped whole, not typed
				continue
			}
		}
		out = append(out, keyEsc)
	}
	return out
}

// tildeKeys are the keys sent as ESC [ n ~.
var tildeKeys = map[string]int{"1": keyHome, "7": keyHome, "4": keyEnd, "8": keyEnd, "5": keyPgUp, "6": keyPgDn}

// utf8Locale reports whether the locale (the first of LC_ALL, LC_CTYPE and
// LANG that is set, as POSIX orders them) names UTF-8.
func utf8Locale() bool {
	for _, k := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := strings.ToLower(os.Getenv(k)); v != "" {
			return strings.Contains(v, "utf-8") || strings.Contains(v, "utf8")
		}
	}
	return false
}

func termSize(f *os.File) (rows, cols int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 {
		return 24, 80
	}
	return int(ws.Row), int(ws.Col)
}
