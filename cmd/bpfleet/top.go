package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// snapshotSource yields one snapshot per call: a local scan, or a remote
// agent's API.
type snapshotSource func(ctx context.Context) (*agent.Snapshot, error)

func init() {
	var (
		every      time.Duration
		remote     string
		tokenFile  string
		sortKey    string
		filter     string
		iterations int
		common     agentFlags
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of BPF programs sorted by CPU share, with misses highlighted",
		Long: `top shows every BPF program's per-interval cost and misses, refreshed every
--interval, with a per-attach-type panel.

Keys: q quit · s next sort column · r reverse · c cpu · n runs/s · m misses
· / filter by name, type, attach type or target (Enter to apply, Esc to clear).

When stdout is not a terminal, top prints plain lines, one block per interval.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if every < 100*time.Millisecond {
				return fmt.Errorf("--interval must be at least 100ms, got %v", every)
			}
			view := newTopView()
			if err := view.setSort(sortKey); err != nil {
				return err
			}
			view.filter = filter
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			var src snapshotSource
			if remote != "" {
				token, err := api.LoadToken(tokenFile)
				if err != nil {
					return err
				}
				src = func(ctx context.Context) (*agent.Snapshot, error) { return api.FetchSnapshot(ctx, remote, token) }
			} else {
				cfg := common.config()
				cfg.EnableStats = true
				cfg.OwnerIterator = !common.noIter
				a, err := newAgent(cfg)
				if err != nil {
					return err
				}
				defer a.Close()
				src = a.Scan
			}
			out := cmd.OutOrStdout()
			if f, ok := out.(*os.File); ok && isTerminal(f) && isTerminal(os.Stdin) {
				return runInteractive(ctx, src, view, every, f, os.Stdin)
			}
			return runPlain(ctx, src, view, every, out, iterations)
		},
	}
	cmd.Flags().DurationVarP(&every, "interval", "i", time.Second, "refresh interval")
	cmd.Flags().StringVar(&remote, "remote", "", "read snapshots from a bpfleet agent's API at this URL instead of scanning locally")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "bearer token file for --remote")
	cmd.Flags().StringVar(&sortKey, "sort", "cpu", "initial sort: cpu, runs, misses, nsrun, id, name")
	cmd.Flags().StringVar(&filter, "filter", "", "initial filter (substring of name, type, attach type or target)")
	cmd.Flags().IntVarP(&iterations, "count", "n", 0, "plain output: stop after this many intervals (0: until interrupted)")
	common.register(cmd)
	rootCmd.AddCommand(cmd)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// runPlain prints one block of lines per interval, for pipes and logs.
func runPlain(ctx context.Context, src snapshotSource, v *topView, every time.Duration, w io.Writer, count int) error {
	return everyInterval(ctx, src, every, count, func(s *agent.Snapshot) error {
		v.renderPlain(w, s)
		return nil
	})
}

// runInteractive draws the live screen in raw mode on the alternate screen
// and restores the terminal on every exit path.
func runInteractive(ctx context.Context, src snapshotSource, v *topView, every time.Duration, out, in *os.File) error {
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

	keys := make(chan byte, 16)
	go func() {
		buf := make([]byte, 16)
		for {
			n, err := in.Read(buf)
			if err != nil {
				close(keys)
				return
			}
			for _, b := range buf[:n] {
				keys <- b
			}
		}
	}()

	last, err := src(ctx)
	if err != nil {
		return err
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
			draw()
		case k, ok := <-keys:
			if !ok || v.key(k) {
				return nil
			}
			draw()
		}
	}
}

func termSize(f *os.File) (rows, cols int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 {
		return 24, 80
	}
	return int(ws.Row), int(ws.Col)
}
