package exporter

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/internal/config"
)

// In a pod (K8S_NODE_NAME set) the resource names the node: host.name is
// the node's name, not the pod's hostname, and nothing names the agent's
// pod, even when OTEL_RESOURCE_ATTRIBUTES does (as the 0.1.0 chart did):
// the resource is in every series, and a rollout must not renew them.
func TestResourceNamesTheNode(t *testing.T) {
	env := config.MapEnv(map[string]string{
		"K8S_NODE_NAME":            "node-7",
		"OTEL_RESOURCE_ATTRIBUTES": "k8s.node.name=node-7,bpfleet.agent.pod.name=bpfleet-x7k2p,bpfleet.agent.pod.namespace=bpfleet-system,k8s.pod.uid=1234,k8s.cluster.name=prod",
	})
	c := config.DefaultAgent()
	c.NodeName = "" // the test's env, not this process's
	if err := c.Resolve(env); err != nil {
		t.Fatal(err)
	}
	res, dropped, err := newResource(context.Background(), Config{NodeName: c.NodeName, ClusterName: c.ClusterName, NodePool: "web", OTel: c.OTel})
	if err != nil {
		t.Fatal(err)
	}
	got := map[attribute.Key]string{}
	for _, kv := range res.Attributes() {
		got[kv.Key] = kv.Value.AsString()
	}
	for k, want := range map[attribute.Key]string{
		attrHostName:          "node-7",
		attrK8sNodeName:       "node-7",
		attrServiceInstanceID: "node-7",
		attrK8sClusterName:    "prod",
		attrK8sNodePoolName:   "web", // from the node's labels
		// The namespace is the release's: it does not change with a rollout.
		"bpfleet.agent.pod.namespace": "bpfleet-system",
	} {
		if got[k] != want {
			t.Errorf("resource %s = %q, want %q", k, got[k], want)
		}
	}
	for _, k := range agentPodKeys {
		if v, ok := got[attribute.Key(k)]; ok {
			t.Errorf("resource names the agent's pod: %s=%q", k, v)
		}
	}
	if len(dropped) != 2 {
		t.Errorf("dropped %v, want bpfleet.agent.pod.name and k8s.pod.uid", dropped)
	}

	// Outside Kubernetes host.name is the host's name.
	res, _, err = newResource(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, kv := range res.Attributes() {
		if kv.Key == attrHostName && kv.Value.AsString() != host {
			t.Errorf("host.name off Kubernetes = %q, want %q", kv.Value.AsString(), host)
		}
	}
}
