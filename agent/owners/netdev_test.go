package owners_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/test/pods"
)

// A pod's veth pair, as a CNI wires it: the host end is a veth whose peer
// is in another namespace, the attachment on it says so, and that
// namespace's id leads to the pod (its process's cgroup).
func TestNetdevPeerPod(t *testing.T) {
	set := pods.New(t, 2, pods.TC)
	ds, err := owners.Netdevs()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]owners.Netdev{}
	for _, d := range ds {
		byName[d.Name] = d
	}
	if lo := byName["lo"]; lo.Kind != "" || lo.PeerNetns || lo.Index != 1 {
		t.Errorf("lo: %+v, want ifindex 1, no kind, no peer", lo)
	}
	pods, err := owners.NetnsContainers("")
	if err != nil {
		t.Fatal(err)
	}
	as, st := owners.NetdevAttachments()
	if st.Errors != 0 {
		t.Errorf("attachment walk: %+v", st)
	}
	for _, p := range set.Pods {
		d, ok := byName[p.HostIf]
		if !ok || d.Kind != "veth" || !d.PeerNetns {
			t.Fatalf("pod %d's host end %s: %+v, want a veth with its peer in another namespace", p.Index, p.HostIf, d)
		}
		if c := pods[d.PeerNetnsID]; c.PodUID != p.UID || c.ID != p.ContainerID {
			t.Errorf("pod %d: namespace %d's container %+v, want pod %s container %s", p.Index, d.PeerNetnsID, c, p.UID, p.ContainerID)
		}
		var found bool
		for _, a := range as {
			if a.ProgID != p.Progs["tc"] {
				continue
			}
			found = true
			if id, ok := a.PeerNetnsID(); a.Kind != "veth" || !ok || id != d.PeerNetnsID || a.Target != p.HostIf {
				t.Errorf("pod %d's tc attachment %+v (peer %d %v), want on veth %s with peer namespace %d", p.Index, a, id, ok, p.HostIf, d.PeerNetnsID)
			}
		}
		if !found {
			t.Errorf("pod %d's tc program %d not among the attachments", p.Index, p.Progs["tc"])
		}
	}
}

// A cgroup link names its cgroup by id: the id leads back to the directory,
// and a removed cgroup to an error.
func TestCgroupPath(t *testing.T) {
	mount, err := owners.CgroupV2Mount()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mount, "bpfleet-cgpath-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	p, err := owners.CgroupPath(mount, st.Ino)
	if err != nil || p != dir {
		t.Fatalf("CgroupPath(%s, %d) = %q, %v; want %s", mount, st.Ino, p, err, dir)
	}
	os.Remove(dir)
	if p, err := owners.CgroupPath(mount, st.Ino); err == nil || !errors.Is(err, unix.ESTALE) && !errors.Is(err, unix.ENOENT) {
		t.Errorf("CgroupPath of a removed cgroup = %q, %v; want ESTALE", p, err)
	}
}

// An agent in a pod of its own network namespace (the chart's default)
// reads the interfaces in the host's: its proc root's pid 1's. (Here a proc
// root whose "1" is a child in the host's namespace: this machine's own
// pid 1 may be out of reach, and this process's main thread may be the one
// that enters the pod's namespace.)
func TestHostNetns(t *testing.T) {
	host := exec.Command("sleep", "60")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	root := t.TempDir()
	if err := os.Symlink("/proc/"+strconv.Itoa(host.Process.Pid), filepath.Join(root, "1")); err != nil {
		t.Fatal(err)
	}
	if h, _ := owners.HostNetns(root); h != "" {
		t.Fatalf("in the host's namespace: HostNetns = %q, want none", h)
	}
	set := pods.New(t, 1, pods.TC)
	var inPod string
	var ds []owners.Netdev
	err := owners.InNetns("/proc/"+strconv.Itoa(set.Pods[0].PID)+"/ns/net", func() {
		inPod, _ = owners.HostNetns(root)
		if inPod != "" {
			owners.InNetns(inPod, func() { ds, _ = owners.Netdevs() })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := root + "/1/ns/net"; inPod != want {
		t.Fatalf("in the pod's namespace: HostNetns = %q, want %s", inPod, want)
	}
	for _, d := range ds {
		if d.Name == set.Pods[0].HostIf {
			return
		}
	}
	t.Errorf("the host's interfaces read from the pod's namespace %v lack the pod's host end %s", ds, set.Pods[0].HostIf)
}
