//go:build !lean

package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/internal/config"
)

// TestNodePoolWho: the agent reads its Node only in Kubernetes and only
// where the user did not name the pool; otherwise it asks nothing and
// says nothing. An unreadable kubeconfig stands for any failure: one
// line, no pool.
func TestNodePoolWho(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	for _, tc := range []struct {
		name     string
		node     string
		attrs    map[string]string
		labels   []string
		wantLine string
	}{
		{"the user named the pool", "node-a", map[string]string{config.NodePoolAttr: "gpu"}, config.DefaultNodePoolLabels, ""},
		{"outside Kubernetes", "", nil, config.DefaultNodePoolLabels, ""},
		{"no labels to try", "node-a", nil, nil, ""},
		{"asked, and the API is not there", "node-a", map[string]string{"team": "a"}, config.DefaultNodePoolLabels, "no node pool: the agent's node could not be read"},
	} {
		var out bytes.Buffer
		c := config.DefaultAgent()
		c.NodeName, c.OTel.ResourceAttributes, c.NodePoolLabels = tc.node, tc.attrs, tc.labels
		pool := nodePool(context.Background(), c, slog.New(slog.NewTextHandler(&out, nil)))
		lines := strings.Count(out.String(), "\n")
		if pool != "" || (tc.wantLine == "" && lines != 0) || (tc.wantLine != "" && (lines != 1 || !strings.Contains(out.String(), tc.wantLine))) {
			t.Errorf("%s: pool %q, said %q; want no pool and %q", tc.name, pool, out.String(), tc.wantLine)
		}
	}
}
