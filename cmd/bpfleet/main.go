// Command bpfleet is the node agent and its command-line tools: agent, top,
// list, bench, probe and version. Each subcommand lives in its own file and
// registers itself on rootCmd from an init function.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

var rootCmd = &cobra.Command{
	Use:           "bpfleet",
	Short:         "Measure what every BPF program on this node costs and misses",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "bpfleet", version)
		},
	})
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "bpfleet:", err)
		os.Exit(1)
	}
}

// raiseMemlock lifts RLIMIT_MEMLOCK before a command loads BPF objects:
// kernels before 5.11 charge BPF memory to it (later ones charge the memory
// cgroup and ignore it). Best effort: without CAP_SYS_RESOURCE a load on
// such a kernel fails later with the kernel's own error. It is done here
// rather than with cilium/ebpf/rlimit, whose package init creates a probe
// map in every bpfleet command (0.4 ms of each `bpfleet list`).
func raiseMemlock() {
	inf := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &inf)
}
