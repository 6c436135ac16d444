package owners

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// u writes a pod UID as the systemd driver does.
func u(uid string) string { return strings.ReplaceAll(uid, "-", "_") }

func TestCgroupClass(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		// The kubelet's systemd driver, every QoS class, the container and
		// the pod's own cgroup.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u(pod1) + ".slice/cri-containerd-" + id1 + ".scope", "kubepods/burstable"},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u(pod1) + ".slice/crio-" + id2 + ".scope", "kubepods/besteffort"},
		{"/kubepods.slice/kubepods-pod" + u(pod2) + ".slice/cri-containerd-" + id1 + ".scope", "kubepods/guaranteed"},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u(pod1) + ".slice", "kubepods/burstable"},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u(pod1) + ".slice/crio-conmon-" + id2 + ".scope", "kubepods/besteffort"},
		// A cgroup inside a container (systemd in a pod) stays the pod's.
		{"/kubepods.slice/kubepods-pod" + u(pod2) + ".slice/cri-containerd-" + id1 + ".scope/init.scope", "kubepods/guaranteed"},
		// The cgroupfs driver.
		{"/kubepods/burstable/pod" + pod1 + "/" + id1, "kubepods/burstable"},
		{"/kubepods/besteffort/pod" + pod1 + "/" + id1, "kubepods/besteffort"},
		{"/kubepods/pod" + pod1 + "/" + id1, "kubepods/guaranteed"},
		{"/kubepods/pod" + pod1, "kubepods/guaranteed"},
		// A --cgroup-root under the systemd driver (kind's nodes), and a
		// prefix directory (a nested kubelet, this repository's tests).
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + u(pod1) + ".slice/cri-containerd-" + id1 + ".scope", "kubepods/besteffort"},
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + u(pod1) + ".slice", "kubepods/guaranteed"},
		{"/bpfleet-pods-1234-ab12cd34/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u(pod1) + ".slice", "kubepods/burstable"},
		// The kubelet's cgroups above the pods.
		{"/kubepods.slice", "kubepods"},
		{"/kubepods.slice/kubepods-burstable.slice", "kubepods/burstable"},
		{"/kubepods", "kubepods"},
		{"/kubepods/besteffort", "kubepods/besteffort"},
		// A static pod (32-hex UID).
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0123456789abcdef0123456789abcdef.slice", "kubepods/burstable"},
		// A pod UID that does not parse: still under kubepods.
		{"/kubepods/burstable/podnot-a-uid/" + id1, "kubepods/burstable"},
		{"/kubepods.slice/kubepods-podnot_a_uid.slice", "kubepods"},
		// Other runtimes' containers: the runtime.
		{"/system.slice/docker-" + id1 + ".scope", RuntimeDocker},
		{"/docker/" + id1, RuntimeDocker},
		{"/system.slice/docker-" + id1 + ".scope/init.scope", RuntimeDocker},
		{"/machine.slice/libpod-" + id2 + ".scope", RuntimePodman},
		{"/machine.slice/libpod-conmon-" + id2 + ".scope", RuntimePodman},
		{"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id2 + ".scope/container", RuntimePodman},
		{"/libpod_parent/libpod-" + id2, RuntimePodman},
		{"/system.slice/crio-" + id2 + ".scope", RuntimeCRIO},
		// systemd units: their slice.
		{"/system.slice/sshd.service", "system.slice"},
		{"/system.slice/systemd-journald.service", "system.slice"},
		{"/system.slice/run-r3f2b9c1d8e7a4b5c.service", "system.slice"},
		{"/system.slice/system-getty.slice/getty@tty1.service", "system-getty.slice"},
		{"/user.slice/user-1000.slice/session-3.scope", "user-1000.slice"},
		{"/system.slice/containerd.service/subdir", "system.slice"},
		{"/system.slice", "system.slice"},
		// A slice named after an instance gives way to its parent.
		{"/system.slice/system-vm3f2b9c1d.slice/x.service", "system.slice"},
		// No unit at all: the root, init.scope, hand-made cgroups.
		{"/", "/"},
		{"", "/"},
		{"/init.scope", "/init.scope"},
		{"/mygroup/child", "/mygroup/child"},
		{"/jobs/job-3f2b9c1d8e7a/task", "/jobs/*/task"},
		{"/default/" + id1, "/default/*"}, // nerdctl's namespace
		{"/" + pod1, "/*"},
		{"/cafebabe/deadbeef", "/cafebabe/deadbeef"}, // hex words, no digit
	} {
		if got := CgroupClass(tc.path); got != tc.want {
			t.Errorf("CgroupClass(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// Every container fixture's path has the class of its pod or runtime.
func TestCgroupClassFixtures(t *testing.T) {
	want := map[string]string{
		"containerd-v1-cgroupfs.txt": "kubepods/besteffort", "containerd-v2-systemd.txt": "kubepods/burstable",
		"crio-conmon-v2.txt": "kubepods/besteffort", "crio-v1-hybrid.txt": "kubepods/burstable",
		"crio-v2-systemd-guaranteed.txt": "kubepods/guaranteed", "docker-v1-cgroupfs.txt": "docker",
		"docker-v2-systemd.txt": "docker", "podman-v1-cgroupfs.txt": "podman", "podman-v2-conmon.txt": "podman",
		"podman-v2-user.txt": "podman", "host-v2.txt": "system.slice", "host-v1.txt": "/",
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "proc-cgroup", "*.txt"))
	if len(files) != len(want) {
		t.Fatalf("%d fixtures, %d classes", len(files), len(want))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, path := ContainerOf(ParseProcCgroup(b))
		if got := CgroupClass(path); got != want[filepath.Base(f)] {
			t.Errorf("%s: CgroupClass(%q) = %q, want %q", filepath.Base(f), path, got, want[filepath.Base(f)])
		}
	}
}

func TestNetdevClass(t *testing.T) {
	for _, tc := range []struct{ name, kind, want string }{
		// Per-pod host ends, as CNI plugins name them.
		{"lxc1a2b3c4d5e6f", "veth", "veth:lxc*"},
		{"lxcabcdefabcdef", "veth", "veth:lxc*"}, // no digit: the prefix says it
		{"lxc1a2b3c4d5e6f", "netkit", "netkit:lxc*"},
		{"cali1a2b3c4d5e6", "veth", "veth:cali*"},
		{"veth1a2b3c4", "veth", "veth:veth*"},
		{"veth3f2b9c1d", "veth", "veth:veth*"},
		{"eni1a2b3c4d5e6", "veth", "veth:eni*"},
		{"gke1a2b3c4d5e6", "veth", "veth:gke*"},
		{"azv1a2b3c4d5e6", "veth", "veth:azv*"},
		{"tap1a2b3c4d", "tun", "tun:tap*"},
		// The kind unknown (the interface gone, or in another namespace).
		{"lxc1a2b3c4d5e6f", "", "lxc*"},
		// Any other generated suffix: a Docker network's bridge.
		{"br-3f2b9c1d8e7a", "bridge", "bridge:br-*"},
		// Names that stay: physical, loopback, fixed virtual devices, a
		// pod's own eth0, short numbered ones.
		{"eth0", "", "eth0"},
		{"lo", "", "lo"},
		{"ens5", "", "ens5"},
		{"enp0s31f6", "", "enp0s31f6"},
		{"cilium_host", "veth", "cilium_host"},
		{"cilium_vxlan", "vxlan", "cilium_vxlan"},
		{"flannel.1", "vxlan", "flannel.1"},
		{"vxlan.calico", "vxlan", "vxlan.calico"},
		{"docker0", "bridge", "docker0"},
		{"veth0", "veth", "veth0"},
		{"lxc_health", "veth", "lxc_health"},
		{"vethbeef", "veth", "vethbeef"}, // 4 hex: not generated
		{"", "", ""},
	} {
		if got := NetdevClass(tc.name, tc.kind); got != tc.want {
			t.Errorf("NetdevClass(%q, %q) = %q, want %q", tc.name, tc.kind, got, tc.want)
		}
	}
	if got := NetdevWorkloadClass("veth", "shop", "Deployment", "web"); got != "veth:shop/Deployment/web" {
		t.Errorf("NetdevWorkloadClass = %q", got)
	}
	if got := NetdevWorkloadClass("", "shop", "Pod", "x"); got != "shop/Pod/x" {
		t.Errorf("NetdevWorkloadClass without kind = %q", got)
	}
}

func TestPathClass(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libssl.so.3"},
		{"/proc/4242/root/usr/lib/libssl.so.3", "/proc/*/root/usr/lib/libssl.so.3"},
		{"/proc/self/exe", "/proc/self/exe"},
		{"/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id1 + "/rootfs/usr/bin/envoy", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/*/rootfs/usr/bin/envoy"},
		{"/var/lib/docker/overlay2/" + id2 + "/merged/usr/bin/x", "/var/lib/docker/overlay2/*/merged/usr/bin/x"},
		{"/var/lib/docker/overlay2/" + id2 + "-init/merged/x", "/var/lib/docker/overlay2/*/merged/x"},
		{"/var/lib/containers/storage/overlay/" + id2 + "/merged/x", "/var/lib/containers/storage/overlay/*/merged/x"},
		{"/var/lib/kubelet/pods/" + pod1 + "/volumes/x", "/var/lib/kubelet/pods/*/volumes/x"},
		{"/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/123/fs/usr/bin/x", "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/*/fs/usr/bin/x"},
		{"libc.so.6", "libc.so.6"},
		{"", ""},
	} {
		if got := PathClass(tc.path); got != tc.want {
			t.Errorf("PathClass(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// reinstance gives every run of at least n hex digits with a digit in it
// (what ids look like) other digits of the same shape (a digit for a digit,
// a letter for a letter; only digits with digitsOnly): another instance of
// the same pod, container or interface. A run glued to a word ("pod" + a
// UID) keeps its leading letters: they may be the word's.
func reinstance(s string, n int, digitsOnly bool) string {
	b := []byte(s)
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && isHexDigit(b[j]) {
			j++
		}
		if j-i >= n {
			k := i
			if i > 0 && (b[i-1] >= 'a' && b[i-1] <= 'z' || b[i-1] >= 'A' && b[i-1] <= 'Z') {
				for k < j && b[k] > '9' {
					k++
				}
			}
			if !hasGeneratedRun(string(b[k:j]), n) {
				k = j
			}
			for ; k < j; k++ {
				if b[k] <= '9' {
					b[k] = '0' + (b[k]-'0'+3)%10
				} else if !digitsOnly {
					b[k] = 'a' + (b[k]-'a'+1)%6
				}
			}
		}
		if j == i {
			j++
		}
		i = j
	}
	return string(b)
}

func FuzzCgroupClass(f *testing.F) {
	addCgroupFixtures(f, true)
	f.Add("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + u(pod1) + ".slice")
	f.Add("/system.slice/system-getty.slice/getty@tty1.service")
	f.Add("/jobs/job-3f2b9c1d8e7a/task")
	f.Fuzz(func(t *testing.T, p string) {
		c := CgroupClass(p)
		if c == "" {
			t.Errorf("CgroupClass(%q) is empty", p)
		}
		// No id of the instance is left in the class, and another instance
		// of the same shape has the same class.
		for _, id := range []string{ParseCgroupPath(p).ID, ParseCgroupPath(p).PodUID} {
			if id != "" && strings.Contains(c, id) {
				t.Errorf("CgroupClass(%q) = %q keeps the id %s", p, c, id)
			}
		}
		if hasGeneratedRun(c, 8) {
			t.Errorf("CgroupClass(%q) = %q has a generated run", p, c)
		}
		if q := reinstance(p, 8, false); CgroupClass(q) != c {
			t.Errorf("CgroupClass(%q) = %q but CgroupClass(%q) = %q", p, c, q, CgroupClass(q))
		}
	})
}

func FuzzNetdevClass(f *testing.F) {
	for _, s := range []string{"lxc1a2b3c4d5e6f", "veth1a2b3c4", "eth0", "br-3f2b9c1d8e7a", "cilium_host"} {
		f.Add(s, "veth")
	}
	f.Fuzz(func(t *testing.T, name, kind string) {
		c := NetdevClass(name, kind)
		if c == name {
			return
		}
		rest := c
		if kind != "" {
			rest = strings.TrimPrefix(c, kind+":")
		}
		prefix, ok := strings.CutSuffix(rest, "*")
		if !ok || !strings.HasPrefix(name, prefix) || prefix == "" {
			t.Fatalf("NetdevClass(%q, %q) = %q: not <kind>:<a prefix of the name>*", name, kind, c)
		}
		// Another instance under the same prefix: the same class. (Only
		// its digits change: its letters could spell a known prefix.)
		if q := prefix + reinstance(name[len(prefix):], 1, true); NetdevClass(q, kind) != c {
			t.Errorf("NetdevClass(%q) = %q but NetdevClass(%q) = %q", name, c, q, NetdevClass(q, kind))
		}
	})
}

func FuzzPathClass(f *testing.F) {
	f.Add("/proc/4242/root/usr/lib/libssl.so.3")
	f.Add("/var/lib/kubelet/pods/" + pod1 + "/volumes/x")
	f.Add("/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id1 + "/rootfs/x")
	f.Fuzz(func(t *testing.T, p string) {
		c := PathClass(p)
		if strings.Count(c, "/") != strings.Count(p, "/") {
			t.Errorf("PathClass(%q) = %q: components lost", p, c)
		}
		if PathClass(c) != c {
			t.Errorf("PathClass(%q) = %q, not idempotent: %q", p, c, PathClass(c))
		}
		for comp := range strings.SplitSeq(c, "/") {
			if isHex64(comp) || isPodUID(comp) {
				t.Errorf("PathClass(%q) = %q keeps %q", p, c, comp)
			}
		}
	})
}
