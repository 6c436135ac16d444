package owners

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Attachment is a program attached to a cgroup or a network interface. Such
// programs often have no holder at all: runc's cgroup_device programs, tc and
// XDP programs loaded by a tool that has exited.
type Attachment struct {
	ProgID uint32 `json:"prog_id"`
	// LinkID is set when the kernel says the attachment is a bpf_link.
	LinkID uint32 `json:"link_id,omitempty"`
	// AttachType is libbpf's name: cgroup_device, cgroup_inet_ingress, ...,
	// xdp, tcx_ingress, tcx_egress.
	AttachType string `json:"attach_type"`
	// Target is the cgroup directory or the interface name.
	Target  string `json:"target"`
	Ifindex int    `json:"ifindex,omitempty"`
	// Mode is XDP's (driver, generic, offload) or, for a tc filter in a
	// classful tree, the qdisc kind and the parent it hangs on: "htb 1:10".
	Mode string `json:"mode,omitempty"`
	// Kind is the interface's driver (Netdev.Kind: veth, netkit, ...);
	// empty for a physical interface and a cgroup.
	Kind string `json:"kind,omitempty"`
	// peerNetns is the interface's Netdev.PeerNetnsID plus one; 0: its
	// other end, if any, is not in another namespace.
	peerNetns int64
}

// PeerNetnsID is the id (in the namespace the interface is in) of the
// network namespace that holds the other end of the attachment's
// interface: a pod's, for the host end of a CNI's veth pair.
func (a Attachment) PeerNetnsID() (int32, bool) {
	return int32(a.peerNetns - 1), a.peerNetns != 0
}

// netdevAttachment is an attachment of a program to the interface d.
func netdevAttachment(d Netdev, progID, linkID uint32, attachType, mode string) Attachment {
	a := Attachment{ProgID: progID, LinkID: linkID, AttachType: attachType, Target: d.Name, Ifindex: d.Index, Mode: mode, Kind: d.Kind}
	if d.PeerNetns {
		a.peerNetns = int64(d.PeerNetnsID) + 1
	}
	return a
}

// String describes the attachment: "cgroup:/sys/fs/cgroup/x:cgroup_device",
// "xdp:eth0", "tcx_ingress:lo".
func (a Attachment) String() string {
	if a.Ifindex == 0 && a.Mode == "" && strings.HasPrefix(a.AttachType, "cgroup_") {
		return "cgroup:" + a.Target + ":" + a.AttachType
	}
	return a.AttachType + ":" + a.Target
}

// AttachStats counts an attachment walk's work.
type AttachStats struct {
	Targets int `json:"targets"` // cgroups or interfaces queried
	Queries int `json:"queries"`
	// Unsupported lists attach types this kernel does not know (queried
	// once, then skipped).
	Unsupported []string `json:"unsupported,omitempty"`
	Errors      int      `json:"errors"`
	LastError   string   `json:"last_error,omitempty"`
	Truncated   bool     `json:"truncated"`
	// Denied is the kernel's refusal of BPF_PROG_QUERY itself (EPERM):
	// before Linux 6.9 it wants CAP_NET_ADMIN (later CAP_NET_ADMIN or
	// CAP_SYS_ADMIN). Nothing is then queried; not counted in Errors.
	Denied string `json:"denied,omitempty"`
}

func (st *AttachStats) fail(err error) {
	st.Errors++
	st.LastError = err.Error()
}

// queryRefused asks the kernel whether it lets this process use
// BPF_PROG_QUERY at all: a query of an invalid fd answers EBADF when it
// does and EPERM when the caller lacks the capability. cilium/ebpf's
// QueryPrograms reports that EPERM as ErrNotSupported (its feature test
// fails the same way), which would pass a missing privilege off as a kernel
// without the attach type.
func queryRefused() string {
	if errors.Is(bpfsys.ProgQueryBadFD(uint32(ebpf.AttachCGroupInetIngress)), unix.EPERM) {
		return "BPF_PROG_QUERY: operation not permitted: the kernel wants CAP_NET_ADMIN for it (before Linux 6.9)"
	}
	return ""
}

type cgroupAttach struct {
	at   ebpf.AttachType
	name string
	prog ebpf.ProgramType
}

// cgroupAttachTypes are the attach types BPF_PROG_QUERY answers on a cgroup.
var cgroupAttachTypes = []cgroupAttach{
	{ebpf.AttachCGroupInetIngress, "cgroup_inet_ingress", ebpf.CGroupSKB},
	{ebpf.AttachCGroupInetEgress, "cgroup_inet_egress", ebpf.CGroupSKB},
	{ebpf.AttachCGroupInetSockCreate, "cgroup_inet_sock_create", ebpf.CGroupSock},
	{ebpf.AttachCgroupInetSockRelease, "cgroup_inet_sock_release", ebpf.CGroupSock},
	{ebpf.AttachCGroupInet4PostBind, "cgroup_inet4_post_bind", ebpf.CGroupSock},
	{ebpf.AttachCGroupInet6PostBind, "cgroup_inet6_post_bind", ebpf.CGroupSock},
	{ebpf.AttachCGroupSockOps, "cgroup_sock_ops", ebpf.SockOps},
	{ebpf.AttachCGroupDevice, "cgroup_device", ebpf.CGroupDevice},
	{ebpf.AttachCGroupSysctl, "cgroup_sysctl", ebpf.CGroupSysctl},
	{ebpf.AttachCGroupGetsockopt, "cgroup_getsockopt", ebpf.CGroupSockopt},
	{ebpf.AttachCGroupSetsockopt, "cgroup_setsockopt", ebpf.CGroupSockopt},
	{ebpf.AttachCGroupInet4Bind, "cgroup_inet4_bind", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupInet6Bind, "cgroup_inet6_bind", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupInet4Connect, "cgroup_inet4_connect", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupInet6Connect, "cgroup_inet6_connect", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupUDP4Sendmsg, "cgroup_udp4_sendmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupUDP6Sendmsg, "cgroup_udp6_sendmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupUDP4Recvmsg, "cgroup_udp4_recvmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCGroupUDP6Recvmsg, "cgroup_udp6_recvmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupInet4GetPeername, "cgroup_inet4_getpeername", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupInet6GetPeername, "cgroup_inet6_getpeername", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupInet4GetSockname, "cgroup_inet4_getsockname", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupInet6GetSockname, "cgroup_inet6_getsockname", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupUnixConnect, "cgroup_unix_connect", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupUnixSendmsg, "cgroup_unix_sendmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupUnixRecvmsg, "cgroup_unix_recvmsg", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupUnixGetpeername, "cgroup_unix_getpeername", ebpf.CGroupSockAddr},
	{ebpf.AttachCgroupUnixGetsockname, "cgroup_unix_getsockname", ebpf.CGroupSockAddr},
}

// CgroupOptions bound the cgroup walk.
type CgroupOptions struct {
	// ProgTypes limits the query to the attach types of these program
	// types: a scan that knows which cgroup programs lack an owner asks
	// only for those (28 attach types × every cgroup is a lot of bpf()
	// calls on a busy node). Nil means all.
	ProgTypes []ebpf.ProgramType
	// MaxDepth is how many levels below the root are entered. Default 16.
	MaxDepth int
	// MaxCgroups bounds the cgroups queried. Default 10000.
	MaxCgroups int
}

// CgroupAttachments walks the cgroup v2 hierarchy under root (a cgroup2
// mount point or a directory in one; CgroupV2Mount finds the mount) and
// returns the programs attached directly to each cgroup, not inherited ones.
func CgroupAttachments(root string, opt CgroupOptions) ([]Attachment, AttachStats) {
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = 16
	}
	if opt.MaxCgroups <= 0 {
		opt.MaxCgroups = 10000
	}
	w := cgroupWalker{opt: opt}
	for _, ca := range cgroupAttachTypes {
		if opt.ProgTypes == nil || contains(opt.ProgTypes, ca.prog) {
			w.types = append(w.types, ca)
		}
	}
	if len(w.types) > 0 {
		if w.st.Denied = queryRefused(); w.st.Denied == "" {
			w.dir(root, 0)
		}
	}
	return w.out, w.st
}

func contains(ts []ebpf.ProgramType, t ebpf.ProgramType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

type cgroupWalker struct {
	opt   CgroupOptions
	types []cgroupAttach
	st    AttachStats
	out   []Attachment
	dents []byte
}

func (w *cgroupWalker) dir(dir string, depth int) {
	if w.st.Targets >= w.opt.MaxCgroups {
		w.st.Truncated = true
		return
	}
	w.st.Targets++
	// One fd serves the queries and the listing of sub-cgroups.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err != unix.ENOENT { // removed mid-walk
			w.st.fail(fmt.Errorf("opening cgroup %s: %w", dir, err))
		}
		return
	}
	w.query(fd, dir)
	if len(w.types) == 0 { // every type unknown to the kernel, or refused
		unix.Close(fd)
		return
	}
	var subs []string
	if depth >= w.opt.MaxDepth {
		w.st.Truncated = true
	} else {
		subs, err = w.subdirs(fd)
		if err != nil && err != unix.ENOENT {
			w.st.fail(fmt.Errorf("reading cgroup directory %s: %w", dir, err))
		}
	}
	unix.Close(fd) // before descending: the depth must not cost fds
	for _, sub := range subs {
		w.dir(dir+"/"+sub, depth+1)
	}
}

// subdirs lists the child cgroups of a cgroup directory: the entries whose
// dirent type is a directory (cgroupfs always fills d_type).
func (w *cgroupWalker) subdirs(fd int) ([]string, error) {
	if w.dents == nil {
		w.dents = make([]byte, 32<<10)
	}
	var subs []string
	err := eachDirent(fd, w.dents, func(name []byte, _ uint64, typ byte) {
		if typ == unix.DT_DIR {
			subs = append(subs, string(name))
		}
	})
	return subs, err
}

func (w *cgroupWalker) query(fd int, dir string) {
	for i := 0; i < len(w.types); i++ {
		ca := w.types[i]
		w.st.Queries++
		res, err := link.QueryPrograms(link.QueryOptions{Target: fd, Attach: ca.at})
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
				// This kernel has no such attach type: never ask again.
				w.st.Unsupported = append(w.st.Unsupported, ca.name)
				w.types = append(w.types[:i], w.types[i+1:]...)
				i--
				continue
			}
			w.st.fail(fmt.Errorf("querying %s programs of cgroup %s: %w", ca.name, dir, err))
			continue
		}
		for _, p := range res.Programs {
			lid, _ := p.LinkID()
			w.out = append(w.out, Attachment{ProgID: uint32(p.ID), LinkID: uint32(lid), AttachType: ca.name, Target: dir})
		}
	}
}

// CgroupV2Mount returns where the cgroup v2 hierarchy is mounted, from
// /proc/self/mountinfo: /sys/fs/cgroup on unified hosts,
// /sys/fs/cgroup/unified on hybrid ones.
func CgroupV2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("finding the cgroup2 mount: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mp, ok := mountinfoCgroup2(sc.Text()); ok {
			return mp, nil
		}
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo: mount cgroup2 (e.g. on /sys/fs/cgroup/unified)")
}

// mountinfoCgroup2 returns the mount point of a mountinfo line whose
// filesystem type (after the " - " separator) is cgroup2.
func mountinfoCgroup2(line string) (string, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return "", false
	}
	if fs, _, _ := strings.Cut(post, " "); fs != "cgroup2" {
		return "", false
	}
	f := strings.Fields(pre)
	if len(f) < 5 {
		return "", false
	}
	return unescapeMount(f[4]), true
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Netlink attributes used below (linux/if_link.h).
const (
	iflaIfname       = 3
	iflaXDP          = 43
	iflaXDPAttached  = 2
	iflaXDPProgID    = 4
	iflaXDPDrvProgID = 5
	iflaXDPSkbProgID = 6
	iflaXDPHwProgID  = 7

	xdpAttachedDrv   = 1
	xdpAttachedSkb   = 2
	xdpAttachedHw    = 3
	xdpAttachedMulti = 4
)

// NetdevAttachments lists the XDP (from an RTM_GETLINK dump), tc cls_bpf
// (RTM_GETTFILTER dumps of the clsact/ingress qdisc, and of the qdiscs and
// classes of classful egress trees) and tcx (BPF_PROG_QUERY per interface)
// programs on the interfaces of the calling
// thread's network namespace. Programs in other namespaces (pods' own
// interfaces) need the caller to enter them first.
func NetdevAttachments() ([]Attachment, AttachStats) {
	var st AttachStats
	msgs, err := netlinkDump(unix.RTM_GETLINK, make([]byte, syscall.SizeofIfInfomsg), unix.RTM_NEWLINK)
	if err != nil {
		st.fail(fmt.Errorf("listing interfaces over netlink: %w", err))
		return nil, st
	}
	var out []Attachment
	parents, err := tcEgressParents()
	if err != nil {
		st.fail(err)
	}
	tcx := []struct {
		at   ebpf.AttachType
		name string
	}{{ebpf.AttachTCXIngress, "tcx_ingress"}, {ebpf.AttachTCXEgress, "tcx_egress"}}
	if st.Denied = queryRefused(); st.Denied != "" {
		tcx = nil // XDP and tc come over netlink, which asks no capability
	}
	for i := range msgs {
		d, xdp, err := parseNetdev(&msgs[i])
		if err != nil {
			st.fail(fmt.Errorf("parsing attributes of interface %d: %w", d.Index, err))
			continue
		}
		st.Targets++
		name, ifindex := d.Name, d.Index
		out = append(out, parseXDP(xdp, d)...)
		for _, tc := range []struct {
			parent uint32
			name   string
		}{{tcHClsactIngress, "tc_ingress"}, {tcHClsactEgress, "tc_egress"}} {
			st.Queries++
			ids, err := tcFilters(ifindex, tc.parent)
			if err != nil {
				if !errors.Is(err, unix.ENODEV) {
					st.fail(fmt.Errorf("listing %s filters of %s: %w", tc.name, name, err))
				}
				continue
			}
			for _, id := range ids {
				out = append(out, netdevAttachment(d, id, 0, tc.name, ""))
			}
		}
		for _, p := range parents[ifindex] {
			st.Queries++
			ids, err := tcFilters(ifindex, p.handle)
			if err != nil {
				if !errors.Is(err, unix.ENODEV) {
					st.fail(fmt.Errorf("listing filters of %s %s: %w", name, tcHandle(p.handle), err))
				}
				continue
			}
			for _, id := range ids {
				out = append(out, netdevAttachment(d, id, 0, "tc_egress", p.kind+" "+tcHandle(p.handle)))
			}
		}
		for i := 0; i < len(tcx); i++ {
			st.Queries++
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: tcx[i].at})
			if err != nil {
				if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
					st.Unsupported = append(st.Unsupported, tcx[i].name)
					tcx = append(tcx[:i], tcx[i+1:]...)
					i--
					continue
				}
				if !errors.Is(err, unix.ENODEV) { // interface gone
					st.fail(fmt.Errorf("querying %s programs of %s: %w", tcx[i].name, name, err))
				}
				continue
			}
			for _, p := range res.Programs {
				lid, _ := p.LinkID()
				out = append(out, netdevAttachment(d, uint32(p.ID), uint32(lid), tcx[i].name, ""))
			}
		}
	}
	return out, st
}

// parseXDP reads a nested IFLA_XDP attribute. With one program attached the
// kernel gives IFLA_XDP_PROG_ID and the mode in IFLA_XDP_ATTACHED; with
// several (XDP_ATTACHED_MULTI) one id attribute per mode.
func parseXDP(b []byte, d Netdev) []Attachment {
	var attached byte
	ids := map[uint16]uint32{}
	nlAttrs(b, func(typ uint16, v []byte) {
		switch {
		case typ == iflaXDPAttached && len(v) >= 1:
			attached = v[0]
		case typ >= iflaXDPProgID && typ <= iflaXDPHwProgID && len(v) >= 4:
			ids[typ] = nativeUint32(v)
		}
	})
	mode := map[byte]string{xdpAttachedDrv: "driver", xdpAttachedSkb: "generic", xdpAttachedHw: "offload"}
	var out []Attachment
	add := func(id uint32, m string) {
		if id != 0 {
			out = append(out, netdevAttachment(d, id, 0, "xdp", m))
		}
	}
	switch attached {
	case 0:
	case xdpAttachedMulti:
		add(ids[iflaXDPDrvProgID], "driver")
		add(ids[iflaXDPSkbProgID], "generic")
		add(ids[iflaXDPHwProgID], "offload")
	default:
		add(ids[iflaXDPProgID], mode[attached])
	}
	return out
}

// Container says which container or pod a cgroup attachment belongs to, from
// its cgroup path: runc and crun attach a cgroup_device program to every
// container's cgroup and keep no fd, so this is the only owner such a
// program has. Zero for interface attachments.
func (a Attachment) Container() Container {
	if !strings.HasPrefix(a.AttachType, "cgroup_") {
		return Container{}
	}
	return ParseCgroupPath(a.Target)
}

// NetdevAttachmentsIn is NetdevAttachments in the network namespace at
// nsPath (/proc/PID/ns/net, /run/netns/NAME), entered as InNetns does.
// Needs CAP_SYS_ADMIN.
func NetdevAttachmentsIn(nsPath string) ([]Attachment, AttachStats) {
	var as []Attachment
	var st AttachStats
	if err := InNetns(nsPath, func() { as, st = NetdevAttachments() }); err != nil {
		st.fail(err)
	}
	return as, st
}

// NetNamespaces returns one /proc/PID/ns/net path per network namespace that
// some process is in, other than the caller's own, for NetdevAttachmentsIn.
// Processes that vanish or deny access are skipped.
func NetNamespaces(procRoot string) ([]string, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return nil, fmt.Errorf("reading own network namespace: %w", err)
	}
	type nsKey struct{ dev, ino uint64 }
	seen := map[nsKey]bool{{self.Dev, self.Ino}: true}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []string
	for _, e := range ents {
		if _, ok := parseUint32([]byte(e.Name())); !ok {
			continue
		}
		p := procRoot + "/" + e.Name() + "/ns/net"
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		k := nsKey{st.Dev, st.Ino}
		if !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	return out, nil
}
