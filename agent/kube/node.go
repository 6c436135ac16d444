package kube

import (
	"context"
	"fmt"
	"time"
)

// The agent's --node-pool-labels (internal/config's DefaultNodePoolLabels
// by default) are the keys PoolFromLabels and NodePool try.

// PoolFromLabels is the value of the first of keys that labels has with a
// non-empty value, and that key; "" when none.
func PoolFromLabels(labels map[string]string, keys []string) (pool, key string) {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v, k
		}
	}
	return "", ""
}

// NodePool reads the agent's own Node object once, with the same
// credentials as the pod watch, and names its pool from the first of keys
// it carries. pool is "" with a nil error when the node has none of them;
// an error is the API's (unreachable, refused: see Refused, the node
// absent) and leaves the node without a pool, never the agent stopped.
func NodePool(ctx context.Context, node string, keys []string, timeout time.Duration) (pool, key string, err error) {
	if node == "" {
		return "", "", fmt.Errorf("no node name: set %s from the downward API (spec.nodeName)", NodeNameEnv)
	}
	cfg, err := inClusterConfig()
	if err != nil {
		return "", "", err
	}
	// A server that does not answer must not hold the agent's start.
	cfg.Timeout = timeout
	c, err := newRESTPods(cfg)
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := c.getNode(ctx, node)
	if err != nil {
		return "", "", fmt.Errorf("reading node %s: %w", node, err)
	}
	pool, key = PoolFromLabels(n.Labels, keys)
	return pool, key, nil
}
