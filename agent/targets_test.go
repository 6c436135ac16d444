package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/test/pods"
)

// wantClass is the target class a pod's program of kind k has: its
// workload when known, else its cgroup's QoS class or its interface's
// driver and name prefix.
func wantClass(p *pods.Pod, k pods.Kind, known bool) string {
	var c string
	switch k {
	case pods.Device, pods.CgroupSKB, pods.CgroupSock:
		c = "kubepods/" + p.QoS
		if known {
			c = "shop/Deployment/web"
		}
	default:
		prefix := "veth"
		if strings.HasPrefix(p.HostIf, "lxc") {
			prefix = "lxc"
		}
		c = "veth:" + prefix + "*"
		if known {
			c = "veth:shop/Deployment/web"
		}
		if k == pods.XDP {
			c += " (generic)"
		}
	}
	return c
}

// TestTargetClasses: every kind of per-pod program keeps its full target
// (the container's or pod's cgroup, the host end's name) and gets the class
// of its pod: the workload where the filler names the pod, else the QoS
// class of its cgroup or the driver and CNI prefix of its interface. A pod
// named later (the filler's generation moves) changes the class at the next
// owner refresh; without a filler every class is the kernel's. Programs no
// process holds are owned by their pod (through the cgroup or the
// interface's peer namespace).
func TestTargetClasses(t *testing.T) {
	set := pods.New(t, 4, pods.Kinds...)
	f := &uidFiller{known: map[string]bool{set.Pods[0].UID: true, set.Pods[1].UID: true}, gen: 1}
	a := newTestAgentWith(t, Config{Owners: true, OwnerIterator: true, OwnerRefresh: 1})
	a.SetOwnerFiller(f)
	bare := newTestAgentWith(t, Config{Owners: true, OwnerIterator: true})
	check := func(s *Snapshot, known func(*pods.Pod) bool, what string) {
		t.Helper()
		for _, p := range set.Pods {
			for _, k := range set.Kinds {
				prog := findProg(s, p.Progs[k])
				if prog == nil {
					t.Fatalf("%s: pod %d's %s program %d not seen", what, p.Index, k, p.Progs[k])
				}
				wantTarget := p.HostIf
				switch k {
				case pods.Device:
					wantTarget = p.Scope
				case pods.CgroupSKB, pods.CgroupSock:
					wantTarget = p.Slice
				case pods.XDP:
					wantTarget += " (generic)"
				}
				if c := wantClass(p, k, known(p)); prog.AttachTarget != wantTarget || prog.TargetClass != c {
					t.Errorf("%s: pod %d's %s program: target %q class %q, want %q and %q", what, p.Index, k, prog.AttachTarget, prog.TargetClass, wantTarget, c)
				}
				if len(prog.Links) == 1 && prog.Links[0].TargetClass != prog.TargetClass {
					t.Errorf("%s: pod %d's %s link: class %q, its program's %q", what, p.Index, k, prog.Links[0].TargetClass, prog.TargetClass)
				}
				switch k {
				case pods.Device, pods.TC, pods.XDP: // held by the cgroup or the interface
					if len(prog.Owners) != 1 || prog.Owners[0].Via != ViaAttachment || prog.Owners[0].PodUID != p.UID {
						t.Errorf("%s: pod %d's %s program: owners %+v, want pod %s through the attachment", what, p.Index, k, prog.Owners, p.UID)
					} else if o := prog.Owners[0]; (o.WorkloadName == "web") != known(p) || k == pods.Device && o.ContainerID != p.ContainerID {
						t.Errorf("%s: pod %d's %s program: owner %+v", what, p.Index, k, o)
					}
				default: // links this process holds
					if len(prog.Owners) == 0 || prog.Owners[0].PID != os.Getpid() {
						t.Errorf("%s: pod %d's %s program: owners %+v, want this process", what, p.Index, k, prog.Owners)
					}
				}
			}
		}
	}
	check(scan(t, a), func(p *pods.Pod) bool { return f.known[p.UID] }, "pods 0 and 1 known")
	f.known[set.Pods[2].UID] = true
	f.gen++
	check(scan(t, a), func(p *pods.Pod) bool { return f.known[p.UID] }, "pod 2 named later")
	check(scan(t, bare), func(*pods.Pod) bool { return false }, "no filler")
}

// TestNetnsUnenterable: when the host's network namespace cannot be entered
// (here a procfs root whose pid 1's ns/net is a regular file, which setns
// refuses with EINVAL, as a confining AppArmor profile refuses it), the
// interfaces a tcx link and an XDP attachment name are not read, and
// Degraded says so once per kind of failure, whatever the number of
// programs: the link targets' names and the attachments.
func TestNetnsUnenterable(t *testing.T) {
	set := pods.New(t, 2, pods.TCX, pods.XDP)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "1", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "1", "ns", "net"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := newTestAgentWith(t, Config{Owners: true, ProcRoot: root})
	s := scan(t, a)
	for _, p := range set.Pods {
		if prog := findProg(s, p.Progs[pods.TCX]); prog == nil || !strings.HasPrefix(prog.AttachTarget, "ifindex ") {
			t.Fatalf("pod %d's tcx program: %+v, want a bare ifindex target", p.Index, prog)
		}
	}
	for _, f := range []string{FeatureNetdevNames, FeatureNetdevAttach} {
		n := 0
		for _, d := range s.Degraded {
			if strings.HasPrefix(d, f+": ") {
				n++
				t.Logf("degraded: %s", d)
				if !strings.Contains(d, "setns") || !strings.Contains(d, "invalid argument") {
					t.Errorf("%s: %q does not say the namespace was refused and what to do", f, d)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d Degraded lines for %s, want 1: %q", n, f, s.Degraded)
		}
	}
}

// TestNetnsPodsWalkFails: when the walk for the pods behind interfaces
// fails (here the procfs root is gone after the agent started, as an
// unmounted host /proc would be), the XDP programs on the pods' host ends
// have no pod, and Degraded says so in one line for all of them.
func TestNetnsPodsWalkFails(t *testing.T) {
	set := pods.New(t, 2, pods.XDP)
	root := filepath.Join(t.TempDir(), "proc")
	if err := os.MkdirAll(filepath.Join(root, "1", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	// pid 1's namespace is this process's: interfaces are read here.
	if err := os.Symlink("/proc/self/ns/net", filepath.Join(root, "1", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	a := newTestAgentWith(t, Config{Owners: true, ProcRoot: root})
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	s, err := a.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range set.Pods {
		if prog := findProg(s, p.Progs[pods.XDP]); prog == nil || len(prog.Owners) > 0 {
			t.Fatalf("pod %d's XDP program: %+v, want no pod owner", p.Index, prog)
		}
	}
	n := 0
	for _, d := range s.Degraded {
		if strings.HasPrefix(d, FeatureNetdevPods+": ") {
			n++
			t.Logf("degraded: %s", d)
			if !strings.Contains(d, "no such file or directory") {
				t.Errorf("%q does not say why the walk failed", d)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d Degraded lines for %s, want 1: %q", n, FeatureNetdevPods, s.Degraded)
	}
}
