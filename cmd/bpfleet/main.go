// Command bpfleet is the node agent and its command-line tools: agent, top,
// list, bench, probe and version. Each subcommand lives in its own file and
// registers itself on rootCmd from an init function.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
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
