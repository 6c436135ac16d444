package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bpfleet/bpfleet/test/backends"
)

// TestAgentNodePool: the agent, with the chart's ServiceAccount, reads
// its own Node once and exports the pool its label names as the
// k8s.nodepool.name resource attribute: target_info in a real Prometheus
// carries k8s_nodepool_name. A node without any of the labels gets none,
// and the agent says so in one line. (An agent the server refuses:
// TestAgentWithoutRBAC.)
func TestAgentNodePool(t *testing.T) {
	logVersion(t)
	ctx := context.Background()
	nodes := srv.admin(t).CoreV1().Nodes()
	// The node as a kubelet on GKE would register it.
	registerNode(t, map[string]string{"cloud.google.com/gke-nodepool": "web-pool"})
	token := agentToken(t)

	t.Run("labeled", func(t *testing.T) {
		prom := backends.StartPrometheus(t)
		a := startAgent(t, inPod, token, "--otlp-endpoint", "http://"+prom.Addr+"/api/v1/otlp", "--otlp-protocol", "http/protobuf")
		info := waitTargetInfo(t, prom)
		if got := info["k8s_nodepool_name"]; got != "web-pool" {
			t.Errorf("target_info k8s_nodepool_name = %q, want web-pool (the node's cloud.google.com/gke-nodepool): %v", got, info)
		}
		if lines := grepLines(a.stderr.String(), `msg="node pool"`); len(lines) != 1 || !strings.Contains(lines[0], "label=cloud.google.com/gke-nodepool") {
			t.Errorf("want one line naming the pool and its label, got %q", lines)
		}
	})

	t.Run("unlabeled", func(t *testing.T) {
		n, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Labels, "cloud.google.com/gke-nodepool")
		if _, err := nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		prom := backends.StartPrometheus(t)
		a := startAgent(t, inPod, token, "--otlp-endpoint", "http://"+prom.Addr+"/api/v1/otlp", "--otlp-protocol", "http/protobuf")
		info := waitTargetInfo(t, prom)
		if got, ok := info["k8s_nodepool_name"]; ok {
			t.Errorf("target_info k8s_nodepool_name = %q on a node without a pool label: %v", got, info)
		}
		lines := grepLines(a.stderr.String(), "no node pool")
		if len(lines) != 1 || !strings.Contains(lines[0], "--node-pool-labels") || !strings.Contains(lines[0], "OTEL_RESOURCE_ATTRIBUTES") {
			t.Errorf("want one line saying the node has no pool label and what to do, got %q", lines)
		}
		t.Logf("the agent said: %s", strings.Join(lines, ""))
	})
}

// waitTargetInfo waits for the node's target_info in prom and returns
// its labels.
func waitTargetInfo(t *testing.T, prom *backends.Prometheus) map[string]string {
	t.Helper()
	var info map[string]string
	eventually(t, time.Minute, "the agent's target_info in Prometheus", func() error {
		ss, err := prom.Query(context.Background(), fmt.Sprintf(`target_info{instance=%q}`, nodeName))
		if err != nil {
			return err
		}
		if len(ss) != 1 {
			return errors.New("no target_info yet")
		}
		info = ss[0].Labels
		return nil
	})
	return info
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// registerNode creates the agent's Node with the kubelet's hostname label
// and labels, as a kubelet registers its node (there is none here), and
// deletes it when the test ends.
func registerNode(t *testing.T, labels map[string]string) {
	t.Helper()
	l := map[string]string{"kubernetes.io/hostname": nodeName}
	maps.Copy(l, labels)
	nodes := srv.admin(t).CoreV1().Nodes()
	if _, err := nodes.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: l}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nodes.Delete(context.Background(), nodeName, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting node %s: %v", nodeName, err)
		}
	})
}
