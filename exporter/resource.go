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

// newResource builds the node's resource. The SDK's detectors give
// host.name and os.type but not host.arch, os.version or the CPU model, so
// those come from the agent's KernelInfo. OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME (as internal/config parsed them) are applied last and
// win, the service name over a service.name among the attributes, as the
// SDK's resource.WithFromEnv has it.
func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	node := cfg.NodeName
	host, _ := os.Hostname()
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

	var fromEnv []attribute.KeyValue
	for _, k := range slices.Sorted(maps.Keys(cfg.OTel.ResourceAttributes)) {
		fromEnv = append(fromEnv, attribute.String(k, cfg.OTel.ResourceAttributes[k]))
	}
	if cfg.OTel.ServiceName != "" {
		fromEnv = append(fromEnv, attribute.String(attrServiceName, cfg.OTel.ServiceName))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(kv...),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(fromEnv...),
	)
	if err != nil {
		return nil, fmt.Errorf("building OpenTelemetry resource: %w", err)
	}
	return res, nil
}
