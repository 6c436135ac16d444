package main

import (
	"encoding/json"
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
			if err := c.Validate(); err != nil {
				return err
			}
			opts := c.Options()
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
