package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/bench"
	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/spf13/cobra"
)

func init() {
	var (
		c               config.Bench
		noProgress, tax bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure what each attach type adds per triggered call on this kernel and CPU",
		Long: `bench attaches bpfleet's counting probe of each attach type to a trigger it
controls and measures the trigger rate without and with the probe, like the
kernel's selftests/bpf "bench trig-*", from one thread pinned to one CPU.

Modes: "syscall" triggers with getpgid(2) from user space (what an application
pays); "kernel" runs an in-kernel driver that calls bpf_get_numa_node_id() or
the kfunc bpf_modify_return_test_tp() in a loop, so the syscall does not hide
the attach type's own cost; "auto" uses kernel mode where the kernel has a
trigger for the attach type, else syscall mode.

Times are thread CPU time; --stats on holds BPF_ENABLE_STATS while measuring.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := benchOptions(&c)
			if err != nil {
				return err
			}
			raiseMemlock()
			if tax {
				return runTaxBench(cmd, opts, c.Output)
			}
			var bar *progressBar
			if f, ok := cmd.ErrOrStderr().(*os.File); ok && !noProgress && isTerminal(f) {
				bar = &progressBar{w: f}
				opts.Progress = bar.update
			}
			rep, err := bench.Run(cmd.Context(), opts)
			bar.clear()
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			if c.Output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return bench.WriteTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.AttachTypes, "attach-types", "", "comma-separated attach types (default: all of "+allTypes()+")")
	f.StringVar(&c.Mode, "mode", "auto", "trigger: syscall, kernel or auto")
	f.IntVar(&c.Calls, "calls", 0, fmt.Sprintf("triggered calls per measurement (default %d in syscall mode, %d in kernel mode)", bench.DefaultSyscallCalls, bench.DefaultKernelCalls))
	f.IntVar(&c.Rounds, "rounds", bench.DefaultRounds, "measured rounds (median and spread are over these)")
	f.IntVar(&c.Batch, "batch", catalog.DefaultBatch, "kernel mode: attach-point calls per driver run")
	f.StringVar(&c.Stats, "stats", "off", "BPF run-time stats while measuring: on, off or both")
	f.StringVarP(&c.Output, "output", "o", "table", "output format: table or json")
	f.BoolVar(&noProgress, "no-progress", false, "no progress bar on stderr")
	f.BoolVar(&tax, "tax", false, "measure the stats tax instead: what BPF run-time stats add per run (stats off and on alternated), for no-op xdp and tc programs (BPF_PROG_TEST_RUN) and the attach types")
	rootCmd.AddCommand(cmd)
}

// benchOptions checks c and converts it to the bench's options: the attach
// types, mode and stats here, as they are probes/bench's and
// probes/catalog's enums (internal/config imports no probe package), the
// rest by c.Validate. Every problem is returned at once.
func benchOptions(c *config.Bench) (bench.Options, error) {
	o := bench.Options{Calls: c.Calls, Rounds: c.Rounds, Batch: c.Batch, Stats: bench.Stats(c.Stats), Mode: catalog.Mode(c.Mode)}
	var errs []error
	if c.AttachTypes != "" {
		for _, s := range strings.Split(c.AttachTypes, ",") {
			t, err := catalog.ParseAttachType(strings.TrimSpace(s))
			if err != nil {
				errs = append(errs, &config.Problem{Name: "--attach-types", Value: c.AttachTypes,
					Want: fmt.Sprintf("unknown attach type %s: want a comma-separated list of %s", config.Quote(strings.TrimSpace(s)), allTypes())})
				break
			}
			o.AttachTypes = append(o.AttachTypes, t)
		}
	}
	switch o.Mode {
	case bench.Auto, catalog.Syscall, catalog.Kernel:
	default:
		errs = append(errs, &config.Problem{Name: "--mode", Value: c.Mode, Want: "want syscall, kernel or auto"})
	}
	switch o.Stats {
	case bench.StatsOff, bench.StatsOn, bench.StatsBoth:
	default:
		errs = append(errs, &config.Problem{Name: "--stats", Value: c.Stats, Want: "want on, off or both"})
	}
	if err := errors.Join(append(errs, c.Validate())...); err != nil {
		return bench.Options{}, err
	}
	return o, nil
}

// runTaxBench measures the stats tax (bench --tax).
func runTaxBench(cmd *cobra.Command, opts bench.Options, output string) error {
	rs, err := bench.MeasureTax(cmd.Context(), bench.TaxOptions{AttachTypes: opts.AttachTypes, Mode: opts.Mode, Calls: opts.Calls, Rounds: opts.Rounds})
	if err != nil {
		return fmt.Errorf("bench --tax: %w", err)
	}
	if output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rs)
	}
	return bench.WriteTaxTable(cmd.OutOrStdout(), rs)
}

func allTypes() string {
	var s []string
	for _, t := range catalog.All() {
		s = append(s, string(t))
	}
	return strings.Join(s, ",")
}

// progressBar redraws one line on a terminal.
type progressBar struct {
	w     io.Writer
	drawn bool
}

func (p *progressBar) update(done, total int, step string) {
	const width = 30
	n := done * width / max(total, 1)
	if len(step) > 40 {
		step = step[:40]
	}
	fmt.Fprintf(p.w, "\r\x1b[K[%s%s] %3d%% %s", strings.Repeat("#", n), strings.Repeat(" ", width-n), done*100/max(total, 1), step)
	p.drawn = true
}

func (p *progressBar) clear() {
	if p != nil && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}
