//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/internal/config"
)

// runHealth asks the agent and prints one line: "live", "ready", or why
// not (the API's reason, or why it could not be asked).
func runHealth(cmd *cobra.Command, h config.Health) error {
	path, good := "/healthz", "live"
	if h.Ready {
		path, good = "/readyz", "ready"
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), h.Timeout)
	defer cancel()
	url := "http://" + h.DialAddr() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", url, err)
	}
	// No keep-alive: the probe runs once and exits.
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not %s: asking %s: %w", good, url, err)
	}
	defer resp.Body.Close()
	var st api.Status
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(b, &st) // a foreign answer has no reason: the status says enough
	if resp.StatusCode != http.StatusOK {
		reason := st.Reason
		if reason == "" {
			reason = resp.Status
		}
		return fmt.Errorf("not %s: %s", good, reason)
	}
	if st.Seq > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "%s (scan %d)\n", good, st.Seq)
	} else {
		fmt.Fprintln(cmd.OutOrStdout(), good)
	}
	return nil
}
