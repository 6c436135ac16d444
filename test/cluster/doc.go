// Package cluster tests bpfleet against a real Kubernetes API server: etcd
// and kube-apiserver (built by scripts/build-backends.sh into
// ${BPFLEET_CACHE}/bin) started on loopback with token authentication, RBAC
// authorization and Pod Security admission; the chart installed into it with
// the Helm library; the agent run on the host with the token of the chart's
// ServiceAccount, attributing a process in a container cgroup to the pod the
// server says owns that container.
//
// There is no kubelet, scheduler or controller manager: the tests create the
// Pod objects (with spec.nodeName and the container statuses a kubelet would
// write) and the cgroups themselves.
package cluster
