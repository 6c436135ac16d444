package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/internal/config"
)

// The health command: the kubelet's exec probe (the image has no shell
// and no curl), asking the running agent's local API. It prints one line
// and exits 0 (live, or ready with --ready) or 1.

func init() {
	h := config.DefaultHealth()
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Ask the running agent's local API whether it is live (or ready with --ready): exit 0 or 1",
		Long: fmt.Sprintf(`health asks the agent listening on --api-addr for /healthz (or /readyz with
--ready), prints one line and exits 0 when it is live (ready), 1 when not or
when it does not answer within --timeout. No token is needed.

Live: the agent's scan loop made a pass within max(3 --interval, %v).
Ready: a scan has completed, the latest is younger than 3 --interval, and
the last %d metric exports did not all fail (a backend down or refusing
makes the agent not ready, never restarts it).`, config.MinLivenessBound, config.ReadyExportFailures),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := h.Validate(); err != nil {
				return config.Usage(err)
			}
			return runHealth(cmd, h)
		},
	}
	f := cmd.Flags()
	f.StringVar(&h.APIAddr, "api-addr", h.APIAddr, "the agent's --api-addr (an unspecified host such as 0.0.0.0 is asked on the loopback)")
	f.BoolVar(&h.Ready, "ready", false, "ask for readiness (/readyz) instead of liveness (/healthz)")
	f.DurationVar(&h.Timeout, "timeout", h.Timeout, fmt.Sprintf("how long to wait for the answer (at most %v)", config.MaxHealthTimeout))
	rootCmd.AddCommand(cmd)
}
