// Package cgroups reads container and pod identity out of cgroup paths, as
// containerd, CRI-O, Docker and Podman lay them out under the systemd and
// cgroupfs drivers, on cgroup v1 and v2. It imports nothing but the
// standard library, so the agent's /proc owner walk can use it without
// pulling in client-go.
package cgroups

import (
	"regexp"
	"strings"
)

// Runtimes as Owner.Runtime names them.
const (
	Containerd = "containerd"
	CRIO       = "cri-o"
	Docker     = "docker"
	Podman     = "podman"
)

// Info is what a cgroup path says about its process.
type Info struct {
	// ContainerID is the runtime's 64-hex container id, "" when the path
	// is not a container's.
	ContainerID string
	// Runtime is one of the constants above, "" when the path names none
	// (a bare id under the cgroupfs driver's kubepods/ tree).
	Runtime string
	// PodUID is the Kubernetes pod UID in its canonical dashed form.
	PodUID string
	// QoS is the pod's QoS class as the path names it: guaranteed,
	// burstable or besteffort; "" outside kubepods.
	QoS string
}

var (
	// pod<uid>, with dashes (cgroupfs driver) or underscores (systemd driver).
	podRe = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
	// A container scope (systemd driver) or a bare id directory (cgroupfs).
	scopeRe = regexp.MustCompile(`^(?:(cri-containerd|crio|docker|libpod)-)?([0-9a-f]{64})(?:\.scope)?$`)
)

var scopeRuntime = map[string]string{
	"cri-containerd": Containerd,
	"crio":           CRIO,
	"docker":         Docker,
	"libpod":         Podman,
}

// Parse reads a cgroup path ("/kubepods.slice/.../cri-containerd-<id>.scope")
// or a whole line of /proc/PID/cgroup ("0::/..." or "4:pids:/...").
func Parse(path string) Info {
	if i := strings.Index(path, ":/"); i >= 0 && !strings.HasPrefix(path, "/") {
		path = path[i+1:]
	}
	var inf Info
	parts := strings.Split(strings.TrimSpace(path), "/")
	inKubepods := false
	for _, p := range parts {
		if p == "" {
			continue
		}
		if strings.Contains(p, "kubepods") {
			inKubepods = true
			switch {
			case strings.Contains(p, "besteffort"):
				inf.QoS = "besteffort"
			case strings.Contains(p, "burstable"):
				inf.QoS = "burstable"
			}
		}
		if p == "besteffort" || p == "burstable" {
			inf.QoS = p
		}
		if m := podRe.FindStringSubmatch(p); m != nil && inKubepods {
			inf.PodUID = strings.ReplaceAll(m[1], "_", "-")
			if inf.QoS == "" {
				inf.QoS = "guaranteed"
			}
			continue
		}
		// The conmon scope of a CRI-O container is not the container.
		if strings.HasPrefix(p, "crio-conmon-") {
			continue
		}
		if m := scopeRe.FindStringSubmatch(p); m != nil {
			inf.ContainerID = m[2]
			inf.Runtime = scopeRuntime[m[1]]
			if inf.Runtime == "" && !inKubepods && containsPart(parts, "docker") {
				inf.Runtime = Docker // cgroup v1 cgroupfs: /docker/<id>
			}
		}
	}
	if !inKubepods {
		inf.QoS = ""
	}
	return inf
}

func containsPart(parts []string, s string) bool {
	for _, p := range parts {
		if p == s {
			return true
		}
	}
	return false
}

// ParseProc reads the content of /proc/PID/cgroup: the unified (v2) line
// when there is one with a container, else the first v1 line that names a
// container or pod.
func ParseProc(content string) Info {
	var best Info
	for _, line := range strings.Split(content, "\n") {
		if line == "" {
			continue
		}
		inf := Parse(line)
		if strings.HasPrefix(line, "0::") && (inf.ContainerID != "" || inf.PodUID != "") {
			return inf
		}
		if best.ContainerID == "" && best.PodUID == "" {
			best = inf
		}
	}
	return best
}
