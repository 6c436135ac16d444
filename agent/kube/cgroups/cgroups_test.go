package cgroups

import "testing"

const (
	id1 = "3f4b1a6c9d2e8f7a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a"
	id2 = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	uid = "5d1e9a7c-3b2f-4e8d-9c6a-1f0e2d3c4b5a"
	us  = "5d1e9a7c_3b2f_4e8d_9c6a_1f0e2d3c4b5a"
)

// Fixtures are the layouts the runtimes and kubelet cgroup drivers write.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, path string
		want       Info
	}{
		{"containerd systemd v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id1 + ".scope",
			Info{id1, Containerd, uid, "burstable"}},
		{"containerd systemd v1", "4:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/cri-containerd-" + id1 + ".scope",
			Info{id1, Containerd, uid, "besteffort"}},
		{"containerd guaranteed", "/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-" + id1 + ".scope",
			Info{id1, Containerd, uid, "guaranteed"}},
		{"containerd cgroupfs v1", "9:memory:/kubepods/burstable/pod" + uid + "/" + id1,
			Info{id1, "", uid, "burstable"}},
		{"cgroupfs v2 guaranteed", "0::/kubepods/pod" + uid + "/" + id2,
			Info{id2, "", uid, "guaranteed"}},
		{"cri-o systemd v2", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-" + id2 + ".scope",
			Info{id2, CRIO, uid, "besteffort"}},
		{"cri-o conmon", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-conmon-" + id2 + ".scope",
			Info{"", "", uid, "besteffort"}},
		{"cri-o v1 container nested", "3:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/crio-" + id2 + ".scope/container",
			Info{id2, CRIO, uid, "burstable"}},
		{"kind nested kubelet", "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + us + ".slice/cri-containerd-" + id1 + ".scope",
			Info{id1, Containerd, uid, "burstable"}},
		{"docker systemd v2", "0::/system.slice/docker-" + id1 + ".scope", Info{id1, Docker, "", ""}},
		{"docker cgroupfs v1", "11:devices:/docker/" + id2, Info{id2, Docker, "", ""}},
		{"dockershim systemd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/docker-" + id1 + ".scope",
			Info{id1, Docker, uid, "burstable"}},
		{"podman", "0::/machine.slice/libpod-" + id2 + ".scope/container", Info{id2, Podman, "", ""}},
		{"host service", "0::/system.slice/cilium.service", Info{}},
		{"root", "0::/", Info{}},
		{"user session", "0::/user.slice/user-0.slice/session-3.scope", Info{}},
		{"pod outside kubepods", "0::/system.slice/pod" + uid, Info{}},
		{"short id", "0::/system.slice/docker-abc123.scope", Info{}},
		{"uppercase hex", "0::/docker/" + "3F4B1A6C9D2E8F7A0B1C2D3E4F5A6B7C8D9E0F1A2B3C4D5E6F7A8B9C0D1E2F3A", Info{}},
		{"empty", "", Info{}},
	} {
		if got := Parse(c.path); got != c.want {
			t.Errorf("%s: Parse(%q) = %+v, want %+v", c.name, c.path, got, c.want)
		}
	}
}

func TestParseProc(t *testing.T) {
	v1 := "12:pids:/kubepods/besteffort/pod" + uid + "/" + id1 + "\n" +
		"11:memory:/kubepods/besteffort/pod" + uid + "/" + id1 + "\n" +
		"1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + id1 + "\n"
	if got := ParseProc(v1); got.ContainerID != id1 || got.PodUID != uid {
		t.Errorf("v1 file: %+v", got)
	}
	hybrid := "1:name=systemd:/user.slice\n0::/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-" + id2 + ".scope\n"
	if got := ParseProc(hybrid); got.ContainerID != id2 || got.Runtime != Containerd {
		t.Errorf("hybrid file: %+v", got)
	}
	if got := ParseProc("0::/init.scope\n"); got != (Info{}) {
		t.Errorf("host process: %+v", got)
	}
}
