package owners

import "strings"

// CgroupLine is one line of /proc/PID/cgroup: "hierarchy-ID:controllers:path".
// On cgroup v2 there is one line "0::/path"; on v1 one per hierarchy; hybrid
// systems have both.
type CgroupLine struct {
	Hierarchy   int
	Controllers string
	Path        string
}

// ParseProcCgroup parses /proc/PID/cgroup. Malformed lines are skipped.
func ParseProcCgroup(b []byte) []CgroupLine {
	var lines []CgroupLine
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		if l == "" {
			continue
		}
		id, rest, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		ctrl, path, ok := strings.Cut(rest, ":") // the path itself may contain ':'
		if !ok {
			continue
		}
		h, ok := parseUint32([]byte(id))
		if !ok {
			continue
		}
		lines = append(lines, CgroupLine{Hierarchy: int(h), Controllers: ctrl, Path: path})
	}
	return lines
}

// PrimaryCgroup picks the path that best names the process's cgroup: the v2
// ("0::") path, else the v1 name=systemd one, else the first line's.
func PrimaryCgroup(lines []CgroupLine) string {
	best, rank := "", 0
	for _, l := range lines {
		r := 1
		switch {
		case l.Hierarchy == 0 && l.Controllers == "":
			r = 3
		case l.Controllers == "name=systemd":
			r = 2
		}
		if r > rank {
			best, rank = l.Path, r
		}
	}
	return best
}

// Container runtimes as ParseCgroupPath names them.
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimeDocker     = "docker"
	RuntimePodman     = "podman"
)

// Kubernetes QoS classes as the kubelet's cgroup layout encodes them.
const (
	QoSGuaranteed = "guaranteed"
	QoSBurstable  = "burstable"
	QoSBestEffort = "besteffort"
)

// Container is what a cgroup path says about the container and pod a
// process runs in. Empty fields are unknown.
type Container struct {
	// ID is the 64-hex container id.
	ID      string
	Runtime string
	// Conmon is true for the runtime's monitor process (crio-conmon-<id>,
	// libpod-conmon-<id>): it belongs to the container but runs outside it.
	Conmon bool
	PodUID string
	QoS    string
}

// scopePrefixes are systemd-driver scope names: <prefix><64 hex>.scope.
// Longer prefixes first: "crio-conmon-" must win over "crio-".
var scopePrefixes = []struct {
	prefix, runtime string
	conmon          bool
}{
	{"cri-containerd-", RuntimeContainerd, false},
	{"crio-conmon-", RuntimeCRIO, true},
	{"crio-", RuntimeCRIO, false},
	{"docker-", RuntimeDocker, false},
	{"libpod-conmon-", RuntimePodman, true},
	{"libpod-", RuntimePodman, false},
}

// ParseCgroupPath finds the container id, runtime, pod UID and QoS class in
// a cgroup path, for both cgroup drivers:
//
//	systemd: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	cgroupfs: /kubepods/burstable/pod<uid>/<id>, /docker/<id>, /libpod_parent/libpod-<id>
//
// A kubelet with --cgroup-root under the systemd driver prefixes the slices
// (kind's nodes: /kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/...).
//
// When several components name a container (nested cgroups, containers in
// containers) the innermost wins.
func ParseCgroupPath(p string) Container {
	var c Container
	kube := false
	parent := ""
	for p != "" {
		var comp string
		if i := strings.IndexByte(p, '/'); i >= 0 {
			comp, p = p[:i], p[i+1:]
		} else {
			comp, p = p, ""
		}
		if comp == "" {
			continue
		}
		switch {
		case comp == "kubepods" || comp == "kubepods.slice" || strings.HasSuffix(comp, "-kubepods.slice"):
			kube = true
		case kube && (comp == "burstable" || strings.HasSuffix(comp, "kubepods-burstable.slice")):
			c.QoS = QoSBurstable
		case kube && (comp == "besteffort" || strings.HasSuffix(comp, "kubepods-besteffort.slice")):
			c.QoS = QoSBestEffort
		case kube && c.PodUID == "" && strings.HasPrefix(comp, "pod"):
			// cgroupfs: pod<uid>
			if uid, ok := podUID(comp[len("pod"):], false); ok {
				c.PodUID = uid
			}
		case kube && c.PodUID == "" && strings.Contains(comp, "kubepods-") && strings.HasSuffix(comp, ".slice"):
			// systemd: [<root>-]kubepods[-qos]-pod<uid with '_'>.slice
			s := strings.TrimSuffix(comp, ".slice")
			if i := strings.LastIndex(s, "-pod"); i >= 0 {
				if uid, ok := podUID(s[i+len("-pod"):], true); ok {
					c.PodUID = uid
				}
			}
		default:
			if id, rt, conmon, ok := containerComponent(comp, parent, kube); ok {
				c.ID, c.Runtime, c.Conmon = id, rt, conmon
			}
		}
		parent = comp
	}
	if c.PodUID != "" && c.QoS == "" {
		// A pod directly under kubepods is in the Guaranteed class.
		c.QoS = QoSGuaranteed
	}
	return c
}

func containerComponent(comp, parent string, kube bool) (id, runtime string, conmon, ok bool) {
	if s, found := strings.CutSuffix(comp, ".scope"); found {
		for _, sp := range scopePrefixes {
			if rest, ok := strings.CutPrefix(s, sp.prefix); ok && isHex64(rest) {
				return rest, sp.runtime, sp.conmon, true
			}
		}
		return "", "", false, false
	}
	// cgroupfs driver: the component is the id itself, or libpod-<id>;
	// CRI-O under cgroupfs uses crio-<id> without .scope.
	if rest, found := strings.CutPrefix(comp, "libpod-"); found && isHex64(rest) {
		return rest, RuntimePodman, false, true
	}
	if rest, found := strings.CutPrefix(comp, "crio-"); found && isHex64(rest) {
		return rest, RuntimeCRIO, false, true
	}
	if !isHex64(comp) {
		return "", "", false, false
	}
	switch {
	case parent == "docker":
		return comp, RuntimeDocker, false, true
	case parent == "libpod_parent":
		return comp, RuntimePodman, false, true
	case kube:
		// containerd and docker both use the bare id under kubepods: the
		// path does not say which.
		return comp, "", false, true
	}
	return "", "", false, false
}

// podUID validates a pod UID: a canonical UUID (8-4-4-4-12 hex) or, for
// static pods, 32 hex digits. The systemd driver writes '-' as '_'.
func podUID(s string, underscores bool) (string, bool) {
	if underscores {
		s = strings.ReplaceAll(s, "_", "-")
	}
	switch len(s) {
	case 32:
		if !isHex(s) {
			return "", false
		}
	case 36:
		for i := 0; i < len(s); i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return "", false
				}
			} else if !isHexDigit(c) {
				return "", false
			}
		}
	default:
		return "", false
	}
	return s, true
}

func isHex64(s string) bool { return len(s) == 64 && isHex(s) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isHexDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
}

// ContainerOf finds the container of a process from its /proc/PID/cgroup
// lines. It tries the primary path first and then every other line, because
// on hybrid hosts the v2 line can name a systemd unit while the v1 lines
// name the container. It returns the path it used: the one that named a
// container, or the primary path when none did.
func ContainerOf(lines []CgroupLine) (Container, string) {
	primary := PrimaryCgroup(lines)
	if c := ParseCgroupPath(primary); c.ID != "" || c.PodUID != "" {
		return c, primary
	}
	for _, l := range lines {
		if l.Path == primary {
			continue
		}
		if c := ParseCgroupPath(l.Path); c.ID != "" || c.PodUID != "" {
			return c, l.Path
		}
	}
	return Container{}, primary
}
