package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/features"
	"github.com/spf13/cobra"
)

func init() {
	var c config.Probe
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Report what this kernel supports, asked of the kernel by loading and attaching",
		Long: `probe loads, attaches and fires bpfleet's own probe for every attach type
(fentry, fexit, fmod_ret, fentry.s, tp_btf, raw_tp, tracepoint, kprobe,
kretprobe, kprobe.multi, uprobe, lsm), in syscall and in-kernel trigger mode,
and checks BTF, run-time stats, iterators, the ring buffer and kprobe link
"missed". Each refusal carries the kernel's reason.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.Validate(); err != nil {
				return err
			}
			raiseMemlock()
			r := features.Probe()
			if c.Output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return writeProbeTable(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().StringVarP(&c.Output, "output", "o", "table", "output format: table or json")
	rootCmd.AddCommand(cmd)
}

func writeProbeTable(w io.Writer, r features.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	k := r.Kernel
	fmt.Fprintf(tw, "kernel\t%s %s, %s, %d CPUs\n\n", k.Release, k.Arch, k.CPUModel, k.CPUs)
	fmt.Fprintln(tw, "FEATURE\tSUPPORTED\tREASON")
	for _, f := range r.Features {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, answer(f.Supported, f.Inconclusive), f.Reason)
	}
	fmt.Fprintln(tw, "\nATTACH TYPE\tSYSCALL TRIGGER\tKERNEL TRIGGER\tREASON")
	for _, a := range r.AttachTypes {
		var reasons []string
		if a.Reason != "" {
			reasons = append(reasons, "syscall: "+a.Reason)
		}
		if a.KernelMode.Reason != "" {
			reasons = append(reasons, "kernel: "+a.KernelMode.Reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.AttachType, answer(a.Supported, a.Inconclusive),
			answer(a.KernelMode.Supported, a.KernelMode.Inconclusive), strings.Join(reasons, "; "))
	}
	return tw.Flush()
}

func answer(ok, inconclusive bool) string {
	switch {
	case ok:
		return "yes"
	case inconclusive:
		return "unknown"
	}
	return "no"
}
