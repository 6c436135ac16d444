package exporter

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
)

// hostArch maps uname's machine to the host.arch values of the OTel
// semantic conventions.
func hostArch(machine string) string {
	switch machine {
	case "x86_64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "i386", "i686":
		return "x86"
	case "ppc64le":
		return "ppc64"
	case "s390x":
		return "s390x"
	case "armv7l", "armv6l":
		return "arm32"
	}
	return machine
}

// agentPodKeys are resource attributes that would name the agent's own
// pod. The resource is on every series, and a backend that keeps resource
// attributes in series identity (Prometheus once they are promoted) would
// start a new set of every series each time the DaemonSet rolls: the
// resource names the node, never the pod, and these are dropped from
// OTEL_RESOURCE_ATTRIBUTES (an older chart, or extraEnv, set the first).
var agentPodKeys = []string{"bpfleet.agent.pod.name", attrK8sPodName, "k8s.pod.uid"}

// newResource builds the node's resource. The SDK's detectors give
// host.name and os.type but not host.arch, os.version or the CPU model, so
// those come from the agent's KernelInfo. OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME (as internal/config parsed them) are applied last and
// win, the service name over a service.name among the attributes, as the
// SDK's resource.WithFromEnv has it, but for agentPodKeys, which are
// dropped (dropped lists them, for one log line).
func newResource(ctx context.Context, cfg Config) (res *resource.Resource, dropped []string, err error) {
	node := cfg.NodeName
	// In a pod the hostname is the pod's name (with the pod network),
	// which changes with every rollout: host.name is the node's name
	// wherever the node is known, the hostname only outside Kubernetes.
	host := node
	if host == "" {
		host, _ = os.Hostname()
	}
	// Prometheus' OTLP receiver keys series by job (service.name) and
	// instance (service.instance.id): without a per-node instance id every
	// node's series would collide.
	instance := node
	if instance == "" {
		instance = host
	}
	kv := []attribute.KeyValue{
		attribute.String(attrServiceName, "bpfleet-agent"),
		attribute.String(attrOSType, "linux"),
	}
	add := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	add(attrServiceInstanceID, instance)
	add(attrHostName, host)
	add(attrHostArch, hostArch(cfg.Kernel.Arch))
	add(attrHostCPUModelName, cfg.Kernel.CPUModel)
	add(attrOSVersion, cfg.Kernel.Release)
	add(attrKernelPreempt, cfg.Kernel.Preempt)
	add(attrK8sNodeName, node)
	add(attrK8sClusterName, cfg.ClusterName)
	add(attrK8sNodePoolName, cfg.NodePool)

	var fromEnv []attribute.KeyValue
	for _, k := range slices.Sorted(maps.Keys(cfg.OTel.ResourceAttributes)) {
		if slices.Contains(agentPodKeys, k) {
			dropped = append(dropped, k)
			continue
		}
		fromEnv = append(fromEnv, attribute.String(k, cfg.OTel.ResourceAttributes[k]))
	}
	if cfg.OTel.ServiceName != "" {
		fromEnv = append(fromEnv, attribute.String(attrServiceName, cfg.OTel.ServiceName))
	}
	res, err = resource.New(ctx,
		resource.WithAttributes(kv...),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(fromEnv...),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("building OpenTelemetry resource: %w", err)
	}
	return res, dropped, nil
}
