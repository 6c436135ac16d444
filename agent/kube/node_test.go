package kube

import (
	"testing"

	"github.com/bpfleet/bpfleet/internal/config"
)

// TestPoolFromLabels: the first of the keys the node carries with a
// value, in the keys' order (not the labels'), none when it has none.
func TestPoolFromLabels(t *testing.T) {
	keys := config.DefaultNodePoolLabels
	for _, tc := range []struct {
		name            string
		labels          map[string]string
		keys            []string
		wantPool, wantK string
	}{
		{"GKE", map[string]string{"cloud.google.com/gke-nodepool": "web", "kubernetes.io/os": "linux"}, keys, "web", "cloud.google.com/gke-nodepool"},
		{"EKS managed node group", map[string]string{"eks.amazonaws.com/nodegroup": "ng-batch"}, keys, "ng-batch", "eks.amazonaws.com/nodegroup"},
		{"AKS", map[string]string{"kubernetes.azure.com/agentpool": "nodepool1", "agentpool": "nodepool1"}, keys, "nodepool1", "kubernetes.azure.com/agentpool"},
		{"Karpenter", map[string]string{"karpenter.sh/nodepool": "default"}, keys, "default", "karpenter.sh/nodepool"},
		// Karpenter on EKS beside a managed group's label: the keys'
		// order decides, not the map's.
		{"two: the earlier key", map[string]string{"karpenter.sh/nodepool": "spot", "eks.amazonaws.com/nodegroup": "ng-1"}, keys, "ng-1", "eks.amazonaws.com/nodegroup"},
		{"an empty value is none", map[string]string{"cloud.google.com/gke-nodepool": "", "karpenter.sh/nodepool": "default"}, keys, "default", "karpenter.sh/nodepool"},
		{"none of them", map[string]string{"kubernetes.io/hostname": "n1", "node.kubernetes.io/instance-type": "m5.large"}, keys, "", ""},
		{"no labels", nil, keys, "", ""},
		{"the user's own key first", map[string]string{"example.com/pool": "gpu", "cloud.google.com/gke-nodepool": "default-pool"}, append([]string{"example.com/pool"}, keys...), "gpu", "example.com/pool"},
		{"no keys: no pool", map[string]string{"cloud.google.com/gke-nodepool": "web"}, nil, "", ""},
	} {
		pool, k := PoolFromLabels(tc.labels, tc.keys)
		if pool != tc.wantPool || k != tc.wantK {
			t.Errorf("%s: pool %q from %q, want %q from %q", tc.name, pool, k, tc.wantPool, tc.wantK)
		}
	}
}
