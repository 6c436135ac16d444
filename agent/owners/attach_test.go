package owners

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/bpfleet/bpfleet/test/nettest"
	"golang.org/x/sys/unix"
)

func loadReturning(t *testing.T, typ ebpf.ProgramType, at ebpf.AttachType, ret int32) (*ebpf.Program, uint32) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "owners_attach", Type: typ, AttachType: at, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	})
	if err != nil {
		t.Fatalf("loading a %v program: %v", typ, err)
	}
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return prog, uint32(id)
}

func findAttachment(as []Attachment, id uint32) *Attachment {
	for i := range as {
		if as[i].ProgID == id {
			return &as[i]
		}
	}
	return nil
}

func TestCgroupAttachments(t *testing.T) {
	mount, err := CgroupV2Mount()
	if err != nil {
		t.Skipf("no cgroup v2: %v", err)
	}
	root := filepath.Join(mount, "bpfleet-owners-test-"+strconv.Itoa(os.Getpid()))
	child := filepath.Join(root, "child")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Skipf("creating a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(child); os.Remove(root) })
	dir, err := os.Open(child)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()

	// Attach with the legacy API and close every fd: nothing holds the
	// programs but the cgroup, as with runc's device programs.
	skb, skbID := loadReturning(t, ebpf.CGroupSKB, ebpf.AttachCGroupInetIngress, 1)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: int(dir.Fd()), Program: skb, Attach: ebpf.AttachCGroupInetIngress}); err != nil {
		t.Fatalf("attaching cgroup_skb: %v", err)
	}
	skb.Close()
	dev, devID := loadReturning(t, ebpf.CGroupDevice, ebpf.AttachCGroupDevice, 1)
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: int(dir.Fd()), Program: dev, Attach: ebpf.AttachCGroupDevice}); err != nil {
		t.Fatalf("attaching cgroup_device: %v", err)
	}
	dev.Close()

	// The whole hierarchy, as the agent walks it.
	as, st := CgroupAttachments(mount, CgroupOptions{})
	t.Logf("%d attachments, stats %+v", len(as), st)
	a := findAttachment(as, skbID)
	if a == nil || a.Target != child || a.AttachType != "cgroup_inet_ingress" || a.LinkID != 0 {
		t.Fatalf("cgroup_skb prog %d: attachment %+v, want on %s", skbID, a, child)
	}
	if got, want := a.String(), "cgroup:"+child+":cgroup_inet_ingress"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if a := findAttachment(as, devID); a == nil || a.Target != child || a.AttachType != "cgroup_device" {
		t.Errorf("cgroup_device prog %d: attachment %+v, want on %s", devID, a, child)
	}
	if st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}

	// Limited to device programs: the skb program is not asked for, and
	// far fewer queries are made.
	as2, st2 := CgroupAttachments(root, CgroupOptions{ProgTypes: []ebpf.ProgramType{ebpf.CGroupDevice}})
	if findAttachment(as2, skbID) != nil || findAttachment(as2, devID) == nil {
		t.Errorf("device-only walk: %+v", as2)
	}
	if st2.Queries != st2.Targets {
		t.Errorf("device-only walk made %d queries on %d cgroups", st2.Queries, st2.Targets)
	}
	// One level below the mount reaches the test's cgroup but not its child.
	as3, st3 := CgroupAttachments(mount, CgroupOptions{MaxDepth: 1})
	if findAttachment(as3, skbID) != nil || !st3.Truncated {
		t.Errorf("MaxDepth 1 from %s: %+v %+v, want the child unseen and truncated", mount, as3, st3)
	}
	as4, st4 := CgroupAttachments(root, CgroupOptions{MaxCgroups: 1})
	if findAttachment(as4, skbID) != nil || !st4.Truncated {
		t.Errorf("MaxCgroups 1: %+v %+v", as4, st4)
	}
}

func TestMountinfoCgroup2(t *testing.T) {
	for _, tc := range []struct {
		line, want string
		ok         bool
	}{
		{"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw", "/sys/fs/cgroup/unified", true},
		{"30 23 0:27 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate", "/sys/fs/cgroup", true},
		{`30 23 0:27 / /mnt/my\040cg rw - cgroup2 none rw`, "/mnt/my cg", true},
		{"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu", "", false},
		{"garbage", "", false},
	} {
		got, ok := mountinfoCgroup2(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("mountinfoCgroup2(%q) = %q, %v", tc.line, got, ok)
		}
	}
}

// inNewNetns runs f on a locked thread in a fresh network namespace and
// then returns the thread to the test's namespace, which frees the fresh one
// and everything attached to its interfaces.
func inNewNetns(t *testing.T, f func()) {
	t.Helper()
	if err := nettest.InFreshNetns(func(int) { f() }); err != nil {
		t.Skipf("creating a network namespace: %v", err)
	}
}

func TestNetdevAttachments(t *testing.T) {
	xdp, xdpID := loadReturning(t, ebpf.XDP, ebpf.AttachXDP, 2 /* XDP_PASS */)
	defer xdp.Close()
	tcxLegacy, tcxLegacyID := loadReturning(t, ebpf.SchedCLS, ebpf.AttachTCXIngress, -1 /* TCX_NEXT */)
	defer tcxLegacy.Close()
	tcxLink, tcxLinkID := loadReturning(t, ebpf.SchedCLS, ebpf.AttachTCXEgress, -1)
	defer tcxLink.Close()
	cls, clsID := loadReturning(t, ebpf.SchedCLS, ebpf.AttachNone, 0 /* TC_ACT_OK */)
	defer cls.Close()

	var as []Attachment
	var st AttachStats
	var linkID uint32
	var setupErr error
	inNewNetns(t, func() {
		const lo = 1 // the loopback device is ifindex 1 in every namespace
		if setupErr = nettest.SetXDP(lo, xdp.FD()); setupErr != nil {
			return
		}
		if setupErr = link.RawAttachProgram(link.RawAttachProgramOptions{Target: lo, Program: tcxLegacy, Attach: ebpf.AttachTCXIngress}); setupErr != nil {
			return
		}
		if setupErr = nettest.AddClsBPF(lo, cls.FD()); setupErr != nil {
			return
		}
		l, err := link.AttachTCX(link.TCXOptions{Interface: lo, Program: tcxLink, Attach: ebpf.AttachTCXEgress})
		if err != nil {
			setupErr = err
			return
		}
		defer l.Close()
		info, err := l.Info()
		if err != nil {
			setupErr = err
			return
		}
		linkID = uint32(info.ID)
		as, st = NetdevAttachments()
	})
	if errors.Is(setupErr, unix.EINVAL) || errors.Is(setupErr, ebpf.ErrNotSupported) {
		t.Skipf("attaching XDP/tcx in a network namespace: %v", setupErr)
	}
	if setupErr != nil {
		t.Fatalf("attaching XDP/tcx in a network namespace: %v", setupErr)
	}
	t.Logf("attachments %+v stats %+v", as, st)
	if a := findAttachment(as, xdpID); a == nil || a.String() != "xdp:lo" || a.Mode != "generic" || a.Ifindex != 1 {
		t.Errorf("xdp prog %d: attachment %+v, want xdp:lo generic", xdpID, a)
	}
	if a := findAttachment(as, tcxLegacyID); a == nil || a.String() != "tcx_ingress:lo" || a.LinkID != 0 {
		t.Errorf("tcx prog %d: attachment %+v, want tcx_ingress:lo without link", tcxLegacyID, a)
	}
	if a := findAttachment(as, tcxLinkID); a == nil || a.String() != "tcx_egress:lo" || a.LinkID != linkID {
		t.Errorf("tcx link prog %d: attachment %+v, want tcx_egress:lo with link %d", tcxLinkID, a, linkID)
	}
	if a := findAttachment(as, clsID); a == nil || a.String() != "tc_ingress:lo" {
		t.Errorf("cls_bpf prog %d: attachment %+v, want tc_ingress:lo", clsID, a)
	}
	if st.Errors != 0 || st.Targets != 1 {
		t.Errorf("stats %+v: want one interface, no errors", st)
	}
}

func TestParseXDP(t *testing.T) {
	multi := append(append(append(nettest.Attr(iflaXDPAttached, []byte{xdpAttachedMulti}), nettest.Attr(iflaXDPDrvProgID, nettest.U32(5))...), nettest.Attr(iflaXDPSkbProgID, nettest.U32(6))...), nettest.Attr(iflaXDPProgID, nettest.U32(5))...)
	got := parseXDP(multi, Netdev{Index: 2, Name: "eth0"})
	if len(got) != 2 || got[0].ProgID != 5 || got[0].Mode != "driver" || got[1].ProgID != 6 || got[1].Mode != "generic" {
		t.Errorf("multi: %+v", got)
	}
	if got := parseXDP(nettest.Attr(iflaXDPAttached, []byte{0}), Netdev{Index: 2, Name: "eth0"}); len(got) != 0 {
		t.Errorf("none attached: %+v", got)
	}
	// Truncated and garbage input never panics.
	for i := range multi {
		parseXDP(multi[:i], Netdev{Index: 1, Name: "x"})
	}
	parseXDP([]byte{0xff, 0xff, 0, 0, 1}, Netdev{Index: 1, Name: "x"})
}

// The host's own interfaces (no test programs there): the walk must see
// them and make no errors, whatever qdiscs they have.
func TestNetdevAttachmentsHost(t *testing.T) {
	as, st := NetdevAttachments()
	t.Logf("host attachments %v stats %+v", as, st)
	if st.Targets < 1 || st.Errors != 0 {
		t.Errorf("stats %+v: want at least lo and no errors", st)
	}
}

func TestNetdevAttachmentsIn(t *testing.T) {
	xdp, xdpID := loadReturning(t, ebpf.XDP, ebpf.AttachXDP, 2)
	defer xdp.Close()
	ready := make(chan string)
	release := make(chan struct{})
	defer close(release)
	go func() {
		err := nettest.InFreshNetns(func(int) {
			if err := nettest.SetXDP(1, xdp.FD()); err != nil {
				ready <- "error: " + err.Error()
				return
			}
			ready <- "/proc/" + strconv.Itoa(os.Getpid()) + "/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
			<-release
		})
		if err != nil {
			ready <- "error: creating a network namespace: " + err.Error()
		}
	}()
	ns := <-ready
	if strings.HasPrefix(ns, "error: ") {
		t.Fatal(ns)
	}
	as, st := NetdevAttachmentsIn(ns)
	if a := findAttachment(as, xdpID); a == nil || a.String() != "xdp:lo" {
		t.Errorf("in %s: attachments %v stats %+v, want xdp:lo prog %d", ns, as, st, xdpID)
	}
	// The calling thread stayed in the host namespace.
	host, _ := NetdevAttachments()
	if findAttachment(host, xdpID) != nil {
		t.Errorf("the test's XDP program shows up in the host namespace")
	}
	_, st = NetdevAttachmentsIn("/nonexistent")
	if st.Errors != 1 {
		t.Errorf("missing namespace: stats %+v, want one error", st)
	}
}

func TestAttachmentContainer(t *testing.T) {
	a := Attachment{ProgID: 1, AttachType: "cgroup_device", Target: "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(pod1, "-", "_") + ".slice/cri-containerd-" + id1 + ".scope"}
	if c := a.Container(); c.ID != id1 || c.PodUID != pod1 || c.Runtime != RuntimeContainerd {
		t.Errorf("Container() = %+v", c)
	}
	if c := (Attachment{AttachType: "xdp", Target: "docker"}).Container(); c != (Container{}) {
		t.Errorf("interface attachment has a container: %+v", c)
	}
}

func TestNetNamespaces(t *testing.T) {
	cmd := exec.Command("unshare", "--net", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("starting unshare --net: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	want := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
	// unshare enters the namespace and then execs sleep: wait for the exec.
	for i := 0; i < 200; i++ {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm"); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	nss, err := NetNamespaces("")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(nss, want) {
		t.Errorf("namespaces %v lack the child's %s", nss, want)
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	for _, ns := range nss {
		var st unix.Stat_t
		if unix.Stat(ns, &st) == nil && st.Ino == self.Ino && st.Dev == self.Dev {
			t.Errorf("own namespace listed as %s", ns)
		}
	}
	as, st := NetdevAttachmentsIn(want)
	if st.Targets != 1 || st.Errors != 0 || len(as) != 0 {
		t.Errorf("child's fresh namespace: %v %+v, want lo only and nothing attached", as, st)
	}
}

// addClassfulBPF builds an htb tree on ifindex (root 1:, class 1:10) and
// hangs prog on class 1:10 as a cls_bpf filter, as `tc filter add dev lo
// parent 1:10 bpf da` does.
func addClassfulBPF(ifindex int, fd int) error {
	q := append(nettest.Tcmsg(ifindex, 1<<16, 0xFFFFFFFF /* TC_H_ROOT */, 0), nettest.Attr(tcaKind, []byte("htb\x00"))...)
	glob := make([]byte, 20) // struct tc_htb_glob: version 3, rate2quantum 10
	binary.NativeEndian.PutUint32(glob[0:], 3)
	binary.NativeEndian.PutUint32(glob[4:], 10)
	q = append(q, nettest.Attr(tcaOptions|unix.NLA_F_NESTED, nettest.Attr(2 /* TCA_HTB_INIT */, glob))...)
	if err := nettest.Request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL, q); err != nil {
		return fmt.Errorf("adding htb: %w", err)
	}
	// struct tc_htb_opt: two tc_ratespec of 12 bytes (rate at +8), then
	// buffer, cbuffer, quantum, level, prio. 1 Mbit/s, 10 kB buffers.
	opt := make([]byte, 44)
	binary.NativeEndian.PutUint32(opt[8:], 125000)  // rate.rate, bytes/s
	binary.NativeEndian.PutUint32(opt[20:], 125000) // ceil.rate
	binary.NativeEndian.PutUint32(opt[24:], 10000)  // buffer
	binary.NativeEndian.PutUint32(opt[28:], 10000)  // cbuffer
	c := append(nettest.Tcmsg(ifindex, 1<<16|0x10, 1<<16, 0), nettest.Attr(tcaKind, []byte("htb\x00"))...)
	c = append(c, nettest.Attr(tcaOptions|unix.NLA_F_NESTED, nettest.Attr(1 /* TCA_HTB_PARMS */, opt))...)
	if err := nettest.Request(unix.RTM_NEWTCLASS, unix.NLM_F_CREATE|unix.NLM_F_EXCL, c); err != nil {
		return fmt.Errorf("adding htb class 1:10: %w", err)
	}
	opts := append(nettest.Attr(6 /* TCA_BPF_FD */, nettest.U32(uint32(fd))), nettest.Attr(7 /* TCA_BPF_NAME */, []byte("owners_test\x00"))...)
	const ethPAll = 0x0300
	f := append(nettest.Tcmsg(ifindex, 1, 1<<16|0x10, 1<<16|ethPAll), nettest.Attr(tcaKind, []byte("bpf\x00"))...)
	f = append(f, nettest.Attr(tcaOptions|unix.NLA_F_NESTED, opts)...)
	if err := nettest.Request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL, f); err != nil {
		return fmt.Errorf("adding cls_bpf filter on 1:10: %w", err)
	}
	return nil
}

// TestNetdevAttachmentsClassful: a cls_bpf filter on a class of an htb tree
// is found, with the tree and the class it hangs on.
func TestNetdevAttachmentsClassful(t *testing.T) {
	cls, clsID := loadReturning(t, ebpf.SchedCLS, ebpf.AttachNone, 0)
	defer cls.Close()
	var as []Attachment
	var st AttachStats
	var setupErr error
	inNewNetns(t, func() {
		if setupErr = addClassfulBPF(1, cls.FD()); setupErr != nil {
			return
		}
		as, st = NetdevAttachments()
	})
	if errors.Is(setupErr, unix.ENOENT) || errors.Is(setupErr, unix.EOPNOTSUPP) {
		t.Skipf("building an htb tree: %v (kernel without sch_htb or cls_bpf)", setupErr)
	}
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	t.Logf("attachments %+v stats %+v", as, st)
	if a := findAttachment(as, clsID); a == nil || a.String() != "tc_egress:lo" || a.Mode != "htb 1:10" {
		t.Errorf("cls_bpf prog %d on htb class 1:10: attachment %+v", clsID, a)
	}
	if st.Errors != 0 {
		t.Errorf("stats %+v: want no errors", st)
	}
}
