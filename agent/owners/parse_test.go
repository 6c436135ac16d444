package owners

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	id1  = "3f2b9c1d8e7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c"
	id2  = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	pod1 = "7d1c6a52-0b4e-4a8e-9f0c-2b1d3e4f5a6b"
	pod2 = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
)

func TestProcCgroupFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Container
		path string // the path ContainerOf must pick
	}{
		{"containerd-v2-systemd.txt", Container{ID: id1, Runtime: RuntimeContainerd, PodUID: pod1, QoS: QoSBurstable},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7d1c6a52_0b4e_4a8e_9f0c_2b1d3e4f5a6b.slice/cri-containerd-" + id1 + ".scope"},
		{"containerd-v1-cgroupfs.txt", Container{ID: id1, PodUID: pod1, QoS: QoSBestEffort},
			"/kubepods/besteffort/pod" + pod1 + "/" + id1},
		{"crio-v2-systemd-guaranteed.txt", Container{ID: id2, Runtime: RuntimeCRIO, PodUID: pod2, QoS: QoSGuaranteed},
			"/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9.slice/crio-" + id2 + ".scope"},
		{"crio-conmon-v2.txt", Container{ID: id2, Runtime: RuntimeCRIO, Conmon: true, PodUID: pod2, QoS: QoSBestEffort},
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9.slice/crio-conmon-" + id2 + ".scope"},
		{"crio-v1-hybrid.txt", Container{ID: id2, Runtime: RuntimeCRIO, PodUID: pod2, QoS: QoSBurstable},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6071_8293_a4b5c6d7e8f9.slice/crio-" + id2 + ".scope"},
		{"docker-v2-systemd.txt", Container{ID: id1, Runtime: RuntimeDocker}, "/system.slice/docker-" + id1 + ".scope"},
		{"docker-v1-cgroupfs.txt", Container{ID: id1, Runtime: RuntimeDocker}, "/docker/" + id1},
		{"podman-v2-user.txt", Container{ID: id2, Runtime: RuntimePodman},
			"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id2 + ".scope/container"},
		{"podman-v2-conmon.txt", Container{ID: id2, Runtime: RuntimePodman, Conmon: true}, "/machine.slice/libpod-conmon-" + id2 + ".scope"},
		{"podman-v1-cgroupfs.txt", Container{ID: id2, Runtime: RuntimePodman}, "/libpod_parent/libpod-" + id2},
		{"host-v2.txt", Container{}, "/system.slice/sshd.service"},
		{"host-v1.txt", Container{}, "/"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "proc-cgroup", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, path := ContainerOf(ParseProcCgroup(b))
			if got != tc.want {
				t.Errorf("container = %+v, want %+v", got, tc.want)
			}
			if path != tc.path {
				t.Errorf("path = %q, want %q", path, tc.path)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	lines := ParseProcCgroup([]byte("12:cpu,cpuacct:/a:b\n\nbad line\nx:y:/z\n0::/\n"))
	want := []CgroupLine{{12, "cpu,cpuacct", "/a:b"}, {0, "", "/"}}
	if len(lines) != len(want) {
		t.Fatalf("lines = %+v, want %+v", lines, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
	if p := PrimaryCgroup(lines); p != "/" {
		t.Errorf("primary = %q, want the v2 path /", p)
	}
	if p := PrimaryCgroup([]CgroupLine{{3, "pids", "/p"}, {1, "name=systemd", "/s"}}); p != "/s" {
		t.Errorf("primary without v2 = %q, want the name=systemd path", p)
	}
}

func TestParseCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want Container
	}{
		{"/kubepods/pod" + pod1 + "/" + id1, Container{ID: id1, PodUID: pod1, QoS: QoSGuaranteed}},
		{"/kubepods/burstable/pod" + pod1 + "/crio-" + id2, Container{ID: id2, Runtime: RuntimeCRIO, PodUID: pod1, QoS: QoSBurstable}},
		// static pod: 32-hex UID
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123456789abcdef0123456789abcdef.slice/cri-containerd-" + id1 + ".scope",
			Container{ID: id1, Runtime: RuntimeContainerd, PodUID: "0123456789abcdef0123456789abcdef", QoS: QoSBurstable}},
		// pod slice only (the pause process's parent, or a pod-level cgroup)
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(pod2, "-", "_") + ".slice",
			Container{PodUID: pod2, QoS: QoSBestEffort}},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(pod1, "-", "_") + ".slice/docker-" + id1 + ".scope",
			Container{ID: id1, Runtime: RuntimeDocker, PodUID: pod1, QoS: QoSBurstable}},
		// a --cgroup-root under the systemd driver (kind's nodes)
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + strings.ReplaceAll(pod1, "-", "_") + ".slice/cri-containerd-" + id1 + ".scope",
			Container{ID: id1, Runtime: RuntimeContainerd, PodUID: pod1, QoS: QoSBestEffort}},
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + strings.ReplaceAll(pod1, "-", "_") + ".slice", Container{PodUID: pod1, QoS: QoSGuaranteed}},
		// nested: innermost container wins
		{"/docker/" + id1 + "/docker/" + id2, Container{ID: id2, Runtime: RuntimeDocker}},
		// a sub-cgroup inside a container keeps the container
		{"/system.slice/docker-" + id1 + ".scope/init.scope", Container{ID: id1, Runtime: RuntimeDocker}},
		// not containers
		{"/", Container{}},
		{"", Container{}},
		{"/system.slice/containerd.service", Container{}},
		{"/" + id1, Container{}}, // bare id outside docker/kubepods says nothing
		{"/docker/" + strings.ToUpper(id1), Container{}},
		{"/docker/" + id1[:63], Container{}},
		{"/system.slice/docker-" + id1 + "0.scope", Container{}},
		{"/kubepods/burstable/podnot-a-uid/" + id1, Container{ID: id1, QoS: QoSBurstable}},
		{"/pod" + pod1 + "/x", Container{}}, // pod outside kubepods
		{"/../../..", Container{}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if got := ParseCgroupPath(tc.path); got != tc.want {
				t.Errorf("ParseCgroupPath = %+v, want %+v", got, tc.want)
			}
		})
	}
}
