// Package privilege asks each kernel what the agent can do with exactly the
// privileges the Helm chart gives its pod, against what it can do as root
// with nothing hidden: the same agent (agent.New, scans, calibration) runs
// in children of the test, one with every privilege and one with the
// chart's capability set as its bounding, effective and permitted sets,
// no_new_privs, and the host mounts as the pod sees them (bpffs and the
// chart's other host paths read-only, debugfs absent, tracefs only as the
// chart mounts it). Any feature the chart's privileges lose fails the
// test. Then each capability of the chart is taken away in turn: what the
// agent loses without it is logged (what each capability is for, measured
// on that kernel), and every loss must be named in the agent's Degraded
// lines, or the agent must refuse to start with one line.
//
// It runs on the host (make test) and in every kernel-matrix guest
// (test/kernels), where the kernel's own rules differ: before Linux 6.9
// BPF_PROG_QUERY wants CAP_NET_ADMIN, which the chart adds for that reason.
// What it does not reproduce of a pod: the container runtime's seccomp
// profile and masked /proc paths (test/node runs the real pod).
package privilege

// ChartCapabilities are the capabilities the chart's DaemonSet adds after
// dropping ALL (charts/bpfleet/templates/daemonset.yaml), as Kubernetes
// spells them. test/chart checks the rendered pod against this list, so
// the kernels are asked about exactly what the pod gets.
var ChartCapabilities = []string{"BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH", "NET_ADMIN", "SYSLOG"}

// ChartHostMounts are the host paths the chart mounts at the same path in
// the pod, all read-only (bpffs is writable only under bpfleet/ when
// agent.pinIterators is set). Anything else the host mounts under
// /sys/kernel (debugfs, tracefs unless listed) the pod does not see.
// test/chart checks the rendered pod against this list too.
var ChartHostMounts = []string{"/sys/fs/bpf", "/sys/kernel/btf", "/sys/fs/cgroup", "/sys/kernel/tracing"}
