// Command bpfleet is the node agent and its command-line tools: agent, top,
// list, maps, bench, probe, profile and version. Each subcommand lives in
// its own file and registers itself on rootCmd from an init function.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/initquiet"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

var rootCmd = &cobra.Command{
	Use:           "bpfleet",
	Short:         "Measure what every BPF program on this node costs and misses",
	SilenceUsage:  true,
	SilenceErrors: true,
}

// Exit statuses: a usage error (a bad flag, variable or argument, refused
// before anything starts) is 2, as for other Unix tools; a runtime failure
// is 1.
const (
	exitFailure = 1
	exitUsage   = 2
)

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	return config.Usage(cobra.NoArgs(cmd, args))
}

func init() {
	// Flag parse errors (an unknown flag, "abc" for a duration) are usage
	// errors like the ones internal/config finds.
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return config.Usage(err) })
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "bpfleet", version)
		},
	})
}

func main() {
	initquiet.Restore()
	if err := rootCmd.Execute(); err != nil {
		os.Exit(reportError(err))
	}
}

// reportError prints err, one "bpfleet: " line per problem (internal/config
// joins every problem of one run), and returns the exit status.
func reportError(err error) int {
	msg := err.Error()
	if strings.HasPrefix(msg, "unknown command ") {
		// cobra adds its suggestions on lines of their own.
		msg = strings.Join(strings.Fields(msg), " ")
	}
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			fmt.Fprintln(os.Stderr, "bpfleet:", line)
		}
	}
	// An unknown subcommand is cobra's own error, not marked.
	if config.IsUsage(err) || strings.HasPrefix(msg, "unknown command ") {
		return exitUsage
	}
	return exitFailure
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
