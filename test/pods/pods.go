// Package pods makes, on this host, the pods a kubelet, runc and a CNI
// plugin leave behind for the agent to find, and restarts them: per pod a
// cgroup in the kubelet's systemd-driver layout under the cgroup2 mount
// (kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/
// cri-containerd-<id>.scope), a process in the container's cgroup and its
// own network namespace, a veth pair whose host end is named as a CNI names
// it (lxc<hex> as Cilium, veth<hex> as the bridge plugin), and the programs
// real nodes attach there: runc's device program on the container's cgroup
// (BPF_PROG_ATTACH, no fd kept), cgroup_skb and cgroup_sock links on the
// pod's cgroup, a tc filter, a tcx link and an XDP program on the host end.
// A restart removes every pod and makes new ones: new pod UIDs, container
// ids, interface names and programs. Test-only.
package pods

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/test/nettest"
)

// Kind is one kind of per-pod program.
type Kind string

// The kinds of per-pod programs, named by their program type and how they
// are attached.
const (
	// Device is runc's cgroup_device program on the container's cgroup:
	// BPF_PROG_ATTACH, no fd kept, no name.
	Device Kind = "cgroup_device"
	// CgroupSKB is a cgroup_skb ingress link on the pod's cgroup, held by
	// this process.
	CgroupSKB Kind = "cgroup_skb"
	// CgroupSock is a cgroup_sock (sock_create) link on the pod's cgroup.
	CgroupSock Kind = "cgroup_sock"
	// TC is a direct-action cls_bpf filter on the host end's clsact
	// ingress: the qdisc holds it.
	TC Kind = "tc"
	// TCX is a tcx ingress link on the host end, held by this process.
	TCX Kind = "tcx"
	// XDP is a generic-mode XDP program on the host end, attached through
	// netlink: the interface holds it.
	XDP Kind = "xdp"
)

// Kinds is every kind.
var Kinds = []Kind{Device, CgroupSKB, CgroupSock, TC, TCX, XDP}

// Kubernetes QoS classes, as the kubelet names their cgroups.
var qosClasses = []string{owners.QoSGuaranteed, owners.QoSBurstable, owners.QoSBestEffort}

// Pod is one pod as the node has it.
type Pod struct {
	Index       int // its place in the set: the same across restarts
	UID         string
	QoS         string
	ContainerID string
	// Slice and Scope are the pod's and its container's cgroup directories.
	Slice, Scope string
	// HostIf is the host end of the pod's veth pair; the pod's end is eth0.
	HostIf string
	// PID is the container's process, in the pod's network namespace.
	PID int
	// Progs are the pod's programs by kind.
	Progs map[Kind]uint32
	proc  *exec.Cmd
	links []link.Link
}

// Set is a node's pods.
type Set struct {
	// Root is the set's own directory under the cgroup2 mount: the
	// kubelet's layout is below it (as under a --cgroup-root).
	Root  string
	Kinds []Kind
	Pods  []*Pod
	// Restarts counts the restarts so far.
	Restarts int
}

// New makes n pods with programs of the given kinds; they are removed when
// the test ends.
func New(t testing.TB, n int, kinds ...Kind) *Set {
	t.Helper()
	mount, err := owners.CgroupV2Mount()
	if err != nil {
		t.Fatal(err)
	}
	s := &Set{Root: filepath.Join(mount, "bpfleet-pods-"+strconv.Itoa(os.Getpid())+"-"+randHex(4)), Kinds: kinds}
	if err := os.Mkdir(s.Root, 0o755); err != nil {
		t.Fatalf("making the pods' cgroup root: %v", err)
	}
	t.Cleanup(func() {
		s.remove(t)
		// Bottom up: the QoS slices, kubepods.slice, the root.
		dirs, _ := filepath.Glob(filepath.Join(s.Root, "*", "*"))
		dirs = append(dirs, filepath.Join(s.Root, "kubepods.slice"), s.Root)
		for _, d := range dirs {
			os.Remove(d)
		}
	})
	for i := range n {
		s.Pods = append(s.Pods, &Pod{Index: i})
	}
	s.create(t)
	return s
}

// Restart removes every pod, waits until the kernel has freed their
// programs, and makes each pod again with a new UID, container id,
// interface and programs.
func (s *Set) Restart(t testing.TB) {
	t.Helper()
	s.remove(t)
	s.Restarts++
	s.create(t)
}

// IDs are the ids of every pod's programs.
func (s *Set) IDs() map[uint32]bool {
	ids := map[uint32]bool{}
	for _, p := range s.Pods {
		for _, id := range p.Progs {
			ids[id] = true
		}
	}
	return ids
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newUID() string {
	h := randHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// podSlice is the pod's cgroup below root in the kubelet's systemd layout:
// Guaranteed pods sit directly under kubepods.slice.
func podSlice(root, qos, uid string) string {
	u := strings.ReplaceAll(uid, "-", "_")
	if qos == owners.QoSGuaranteed {
		return filepath.Join(root, "kubepods.slice", "kubepods-pod"+u+".slice")
	}
	return filepath.Join(root, "kubepods.slice", "kubepods-"+qos+".slice", "kubepods-"+qos+"-pod"+u+".slice")
}

func (s *Set) create(t testing.TB) {
	t.Helper()
	for _, p := range s.Pods {
		if err := s.start(p); err != nil {
			t.Fatalf("pod %d: %v", p.Index, err)
		}
	}
}

// start makes pod p afresh.
func (s *Set) start(p *Pod) error {
	p.UID, p.QoS, p.ContainerID = newUID(), qosClasses[p.Index%len(qosClasses)], randHex(32)
	p.Slice = podSlice(s.Root, p.QoS, p.UID)
	p.Scope = filepath.Join(p.Slice, "cri-containerd-"+p.ContainerID+".scope")
	// Half the pods wired as Cilium names its endpoints, half as the
	// bridge plugin does.
	if (p.Index/2)%2 == 0 {
		p.HostIf = "lxc" + randHex(6)
	} else {
		p.HostIf = "veth" + randHex(4)
	}
	p.Progs = map[Kind]uint32{}
	if err := os.MkdirAll(p.Scope, 0o755); err != nil {
		return fmt.Errorf("making the container's cgroup: %w", err)
	}
	scope, err := unix.Open(p.Scope, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the container's cgroup: %w", err)
	}
	defer unix.Close(scope)
	// The container's process, born in its cgroup and its own network
	// namespace, as runc starts it.
	p.proc = exec.Command("sleep", "infinity")
	p.proc.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, UseCgroupFD: true, CgroupFD: scope, Pdeathsig: syscall.SIGKILL}
	if err := p.proc.Start(); err != nil {
		return fmt.Errorf("starting the container's process: %w", err)
	}
	p.PID = p.proc.Process.Pid
	if err := nettest.AddVeth(p.HostIf, "eth0", p.PID); err != nil {
		return err
	}
	ifc, err := net.InterfaceByName(p.HostIf)
	if err != nil {
		return fmt.Errorf("finding %s: %w", p.HostIf, err)
	}
	for _, k := range s.Kinds {
		if err := p.attach(k, scope, ifc.Index); err != nil {
			return fmt.Errorf("attaching its %s program: %w", k, err)
		}
	}
	return nil
}

func load(typ ebpf.ProgramType, at ebpf.AttachType, name string, ret int32) (*ebpf.Program, uint32, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: typ, AttachType: at, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("loading a %v program: %w", typ, err)
	}
	info, err := prog.Info()
	if err != nil {
		prog.Close()
		return nil, 0, err
	}
	id, _ := info.ID()
	return prog, uint32(id), nil
}

func (p *Pod) attach(k Kind, scope, ifindex int) error {
	var prog *ebpf.Program
	var id uint32
	var err error
	var l link.Link
	switch k {
	case Device:
		// runc's program has no name; it allows what the container's
		// spec lists (here everything: return 1).
		if prog, id, err = load(ebpf.CGroupDevice, ebpf.AttachCGroupDevice, "", 1); err == nil {
			err = link.RawAttachProgram(link.RawAttachProgramOptions{Target: scope, Program: prog, Attach: ebpf.AttachCGroupDevice, Flags: unix.BPF_F_ALLOW_MULTI})
		}
	case CgroupSKB:
		if prog, id, err = load(ebpf.CGroupSKB, ebpf.AttachCGroupInetIngress, "pod_skb", 1); err == nil {
			l, err = link.AttachCgroup(link.CgroupOptions{Path: p.Slice, Attach: ebpf.AttachCGroupInetIngress, Program: prog})
		}
	case CgroupSock:
		if prog, id, err = load(ebpf.CGroupSock, ebpf.AttachCGroupInetSockCreate, "pod_sock", 1); err == nil {
			l, err = link.AttachCgroup(link.CgroupOptions{Path: p.Slice, Attach: ebpf.AttachCGroupInetSockCreate, Program: prog})
		}
	case TC:
		if prog, id, err = load(ebpf.SchedCLS, ebpf.AttachNone, "pod_tc", 0); err == nil {
			err = nettest.AddClsBPF(ifindex, prog.FD())
		}
	case TCX:
		if prog, id, err = load(ebpf.SchedCLS, ebpf.AttachTCXIngress, "pod_tcx", -1 /* TCX_NEXT */); err == nil {
			l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
		}
	case XDP:
		if prog, id, err = load(ebpf.XDP, ebpf.AttachXDP, "pod_xdp", 2 /* XDP_PASS */); err == nil {
			err = nettest.SetXDP(ifindex, prog.FD())
		}
	default:
		err = fmt.Errorf("unknown kind %q", k)
	}
	if prog != nil {
		prog.Close() // the cgroup, interface or link holds it now
	}
	if err != nil {
		return err
	}
	p.Progs[k] = id
	if l != nil {
		p.links = append(p.links, l)
	}
	return nil
}

// remove deletes every pod as the kubelet does: the links closed, the
// container's process killed (its network namespace, and with it the veth
// pair, goes away), the cgroups removed; then it waits until the kernel
// has freed every program.
func (s *Set) remove(t testing.TB) {
	t.Helper()
	ids := s.IDs()
	for _, p := range s.Pods {
		for _, l := range p.links {
			l.Close()
		}
		p.links = nil
		if p.proc != nil && p.proc.Process != nil {
			p.proc.Process.Kill()
			p.proc.Wait()
			p.proc = nil
		}
	}
	for _, p := range s.Pods {
		for _, d := range []string{p.Scope, p.Slice} {
			if d == "" {
				continue
			}
			// An exited process leaves its cgroup a moment after the
			// wait.
			var err error
			for range 100 {
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) || !errors.Is(err, unix.EBUSY) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing cgroup %s: %v", d, err)
			}
		}
		p.Scope, p.Slice = "", ""
	}
	// The kernel frees a cgroup's programs and a namespace's interfaces
	// from work queues, a little after the last reference went.
	deadline := time.Now().Add(60 * time.Second)
	for id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				p.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("program %d of a removed pod still loaded after 60 s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
