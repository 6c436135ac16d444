package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/spf13/cobra"
)

func init() {
	var c config.Profiler
	cmd := &cobra.Command{
		Use:   "profile PROG...",
		Short: "Time every run of chosen BPF programs with fentry/fexit, without global stats",
		Long: `profile attaches an fentry/fexit pair to each chosen program (as bpftool prog
profile does for perf counters) and records every run's duration in a per-CPU
log2 histogram; every --interval it prints runs, runs/s, p50/p90/p99, max and
mean. BPF_ENABLE_STATS stays off: only the profiled programs pay: the
trampoline (one fsession program where the kernel has it, else an
fentry/fexit pair) and two clock reads per run. With --window, runs are timed
only for that window of every --period (a counting fentry stays attached, so
runs stay exact): outside the windows a run pays one empty-ish fentry.

PROG is id:N, name:S, tag:S, attach:S (attach type), owner:S (process name,
container id or pod name), or a bare word matching any of them. A program
without BTF, or a kernel that refuses tracing BPF programs, gets one line
saying so.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			scanFlagsSet(cmd, &c.Scan)
			c.Profile.Selectors = args
			if err := c.Validate(); err != nil {
				return err
			}
			cfg := agentConfig(c.Scan)
			cfg.Profile = args
			cfg.Maps = false // the profile shows run times only
			cfg.ProfileWindow, cfg.ProfilePeriod = c.Profile.Window, c.Profile.Period
			a, err := newAgent(cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runProfile(ctx, a.Scan, cmd.OutOrStdout(), cmd.ErrOrStderr(), c.Interval, c.Count)
		},
	}
	cmd.Flags().DurationVarP(&c.Interval, "interval", "i", time.Second, fmt.Sprintf("print every interval (at least %v)", config.MinToolInterval))
	cmd.Flags().IntVarP(&c.Count, "count", "n", 0, "stop after this many intervals (0: until interrupted)")
	cmd.Flags().DurationVar(&c.Profile.Window, "window", 0, "time runs only for this window of every --period (runs are still all counted); 0: time every run")
	cmd.Flags().DurationVar(&c.Profile.Period, "period", 10*time.Second, "the period of --window")
	registerScanFlags(cmd, &c.Scan)
	rootCmd.AddCommand(cmd)
}

// runProfile prints refusals once, then one table per interval.
func runProfile(ctx context.Context, src snapshotSource, out, errw io.Writer, every time.Duration, count int) error {
	s, err := src(ctx)
	if err != nil {
		return err
	}
	ok := 0
	for _, p := range s.Programs {
		switch {
		case p.Profile == nil:
		case p.Profile.Error != "":
			fmt.Fprintln(errw, p.Profile.Error)
		default:
			ok++
		}
	}
	if ok == 0 {
		return errors.New("no program to profile: none matches, or none could be profiled (see above)")
	}
	return everyInterval(ctx, src, every, count, true, func(s *agent.Snapshot) error {
		return printProfiles(out, s)
	})
}

func printProfiles(w io.Writer, s *agent.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tinterval %s\n", s.Time.UTC().Format(time.RFC3339), s.Interval.Round(time.Millisecond))
	fmt.Fprintln(tw, "ID\tNAME\tFUNC\tBY\tRUNS\tTIMED\tRUNS/S\tP50 NS\tP90 NS\tP99 NS\tMEAN NS\tMAX NS")
	for _, p := range s.Programs {
		pr := p.Profile
		if pr == nil || pr.Error != "" {
			continue
		}
		rate := 0.0
		if s.Interval > 0 {
			rate = float64(pr.IntervalRuns) / s.Interval.Seconds()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%d\n", p.ID, p.Name, pr.Func, pr.Shape, pr.Runs, pr.TimedRuns, fmtRate(rate),
			pr.P50Ns, pr.P90Ns, pr.P99Ns, pr.MeanNs, pr.MaxNs)
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
