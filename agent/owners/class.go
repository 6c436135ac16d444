package owners

import (
	"strings"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// A class names what a per-instance attachment target stands for, in terms
// that outlive the instance: a pod's restart makes new cgroups, container
// ids and interfaces, not a new class. The workload metrics level keys its
// series by class (exporter/METRICS.md states the rule); the full target
// stays in the agent's Program for the program level, spans and `list`.

// CgroupClass is the class of the cgroup at rel, a path below the cgroup2
// root ("/kubepods.slice/..."; the mount point stripped):
//
//   - a Kubernetes pod's cgroup or anything below it (its containers):
//     kubepods/<qos> (guaranteed, burstable, besteffort), for both cgroup
//     drivers; the kubepods cgroups above the pods: kubepods. Which
//     workload a pod belongs to takes the Kubernetes API: WorkloadClass;
//   - another runtime's container: the runtime (docker, podman,
//     containerd, cri-o);
//   - a systemd unit or slice: the innermost slice whose name has no id in
//     it (system.slice for the per-unit IPAddressDeny/DeviceAllow programs,
//     user-1000.slice, machine.slice);
//   - the root: "/";
//   - anything else: the path, with every component that names an
//     instance (a run of 8 or more hex digits with a digit in it: container
//     ids, UUIDs, hashes) as "*".
func CgroupClass(rel string) string {
	c := ParseCgroupPath(rel)
	switch {
	case c.QoS != "":
		return "kubepods/" + c.QoS
	case underKubepods(rel):
		return "kubepods"
	case c.Runtime != "":
		return c.Runtime
	}
	comps := strings.FieldsFunc(rel, func(r rune) bool { return r == '/' })
	if len(comps) == 0 {
		return "/"
	}
	for i := len(comps) - 1; i >= 0; i-- {
		if len(comps[i]) > len(".slice") && strings.HasSuffix(comps[i], ".slice") && !hasGeneratedRun(comps[i], 8) {
			return comps[i]
		}
	}
	for i, comp := range comps {
		if hasGeneratedRun(comp, 8) {
			comps[i] = "*"
		}
	}
	return "/" + strings.Join(comps, "/")
}

// underKubepods says whether a component of p is the kubelet's kubepods
// cgroup (either driver, with or without a --cgroup-root prefix).
func underKubepods(p string) bool {
	for comp := range strings.SplitSeq(p, "/") {
		if comp == "kubepods" || comp == "kubepods.slice" || strings.HasSuffix(comp, "-kubepods.slice") {
			return true
		}
	}
	return false
}

// hasGeneratedRun says whether s holds a run of at least n lowercase hex
// digits with a digit among them: what ids and hashes look like, and words
// rarely do.
func hasGeneratedRun(s string, n int) bool {
	run, digit := 0, false
	for i := 0; i <= len(s); i++ {
		if i < len(s) && isHexDigit(s[i]) {
			run++
			digit = digit || s[i] <= '9'
			continue
		}
		if run >= n && digit {
			return true
		}
		run, digit = 0, false
	}
	return false
}

// WorkloadClass is the class of a pod's cgroup or interface when the
// Kubernetes API names the pod: <namespace>/<controller kind>/<controller
// name>, what stays when the pod is replaced (a pod without a controller:
// kind Pod and its name).
func WorkloadClass(namespace, kind, name string) string {
	return namespace + "/" + kind + "/" + name
}

// netdevPrefixes are the prefixes CNI plugins and runtimes give the
// interfaces they make per pod or container, followed by hex digits:
// Cilium lxc<hex> (veth or netkit), Calico cali<hex>, the bridge and ptp
// plugins and Docker veth<hex>, AWS VPC CNI eni<hex>, GKE gke<hex>, Azure
// CNI azv<hex>, libvirt vnet<n>, tap devices tap<hex>.
var netdevPrefixes = []string{"lxc", "cali", "veth", "eni", "gke", "azv", "vnet", "tap"}

// NetdevClass is the class of the interface name of kind (the driver the
// kernel names in IFLA_INFO_KIND: veth, netkit, bridge, ...; "" for a
// physical device or when unknown). A name made per instance — a known
// prefix followed by 5 or more hex digits, or any name ending in a run of 6
// or more hex digits with a digit in it — becomes <kind>:<prefix>* (lxc*,
// veth:lxc*, netkit:lxc*, bridge:br-*); any other name (eth0, lo,
// cilium_host, flannel.1) is its own class. Which pod an interface belongs
// to takes the Kubernetes API: WorkloadClass.
func NetdevClass(name, kind string) string {
	prefix, ok := netdevPrefix(name)
	if !ok {
		return name
	}
	if kind == "" {
		return prefix + "*"
	}
	return kind + ":" + prefix + "*"
}

func netdevPrefix(name string) (string, bool) {
	for _, p := range netdevPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok && len(rest) >= 5 && isHex(rest) {
			return p, true
		}
	}
	i := len(name)
	for i > 0 && isHexDigit(name[i-1]) {
		i--
	}
	if i > 0 && len(name)-i >= 6 && hasGeneratedRun(name[i:], 6) {
		return name[:i], true
	}
	return "", false
}

// NetdevWorkloadClass is the class of an interface of kind whose pod the
// Kubernetes API names: <kind>:<namespace>/<kind>/<name> (veth:shop/Deployment/web).
func NetdevWorkloadClass(kind, namespace, workloadKind, name string) string {
	w := WorkloadClass(namespace, workloadKind, name)
	if kind == "" {
		return w
	}
	return kind + ":" + w
}

// PathClass is a file path (a uprobe's binary) with the components that
// name one instance as "*": the pid in /proc/<pid>/root, a container id or
// overlay directory (64 hex, "-init" too), a pod UID (/var/lib/kubelet/pods/<uid>),
// a containerd snapshot number. Paths without one are returned as they
// are.
func PathClass(p string) string {
	comps := strings.Split(p, "/")
	masked := false
	for i, c := range comps {
		prev := ""
		if i > 0 {
			prev = comps[i-1]
		}
		if _, num := bpfsys.ParseUint64([]byte(c)); (prev == "proc" || prev == "snapshots") && num ||
			isHex64(strings.TrimSuffix(c, "-init")) || isPodUID(c) {
			comps[i] = "*"
			masked = true
		}
	}
	if !masked {
		return p
	}
	return strings.Join(comps, "/")
}

func isPodUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, ok := podUID(s, true)
	return ok
}
