package owners

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Netdev is a network interface as the kernel's link dump describes it.
type Netdev struct {
	Index int    `json:"ifindex"`
	Name  string `json:"name"`
	// Kind is the driver of a virtual device (IFLA_INFO_KIND: veth,
	// netkit, bridge, vxlan, ...); empty for a physical one.
	Kind string `json:"kind,omitempty"`
	// PeerNetns says the device's other end (a veth or netkit pair's) is
	// in another network namespace, whose id in the dumping namespace is
	// PeerNetnsID (IFLA_LINK_NETNSID): a pod's, for a CNI's host end.
	PeerNetns   bool  `json:"peer_netns,omitempty"`
	PeerNetnsID int32 `json:"peer_netnsid,omitempty"`
}

// Netlink attributes of a link (linux/if_link.h).
const (
	iflaLinkinfo    = unix.IFLA_LINKINFO
	iflaInfoKind    = unix.IFLA_INFO_KIND
	iflaLinkNetnsID = unix.IFLA_LINK_NETNSID
)

// parseNetdev reads one RTM_NEWLINK message of a link dump, and its nested
// IFLA_XDP attribute (nil without one).
func parseNetdev(m *syscall.NetlinkMessage) (Netdev, []byte, error) {
	if len(m.Data) < syscall.SizeofIfInfomsg {
		return Netdev{}, nil, errors.New("short ifinfomsg")
	}
	d := Netdev{Index: int(int32(nativeUint32(m.Data[4:8])))}
	d.Name = strconv.Itoa(d.Index)
	var xdp []byte
	var err error
	nlAttrs(m.Data[syscall.SizeofIfInfomsg:], func(typ uint16, v []byte) {
		switch typ {
		case iflaIfname:
			d.Name = string(cstr(v))
		case iflaXDP:
			xdp = v
		case iflaLinkinfo:
			nlAttrs(v, func(typ uint16, v []byte) {
				if typ == iflaInfoKind {
					d.Kind = string(cstr(v))
				}
			})
		case iflaLinkNetnsID:
			if len(v) >= 4 {
				d.PeerNetns, d.PeerNetnsID = true, int32(nativeUint32(v))
			} else {
				err = fmt.Errorf("interface %d: short IFLA_LINK_NETNSID", d.Index)
			}
		}
	})
	return d, xdp, err
}

// Netdevs lists the interfaces of the calling thread's network namespace
// (one RTM_GETLINK dump).
func Netdevs() ([]Netdev, error) {
	msgs, err := netlinkDump(unix.RTM_GETLINK, make([]byte, syscall.SizeofIfInfomsg), unix.RTM_NEWLINK)
	if err != nil {
		return nil, fmt.Errorf("listing interfaces over netlink: %w", err)
	}
	out := make([]Netdev, 0, len(msgs))
	for i := range msgs {
		d, _, err := parseNetdev(&msgs[i])
		if err != nil {
			return out, fmt.Errorf("parsing the interface dump: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// InNetns runs f on a locked thread in the network namespace at nsPath
// (/proc/PID/ns/net, /run/netns/NAME) and returns the thread to its own
// namespace afterwards; if that fails the thread stays locked and the
// runtime discards it, so no other goroutine ever runs in the foreign
// namespace. (Restoring matters: a locked goroutine that exits on the main
// thread wedges it instead of ending it, which would pin the namespace for
// the agent's lifetime.) Needs CAP_SYS_ADMIN. An empty nsPath (HostNetns's
// answer when the agent runs in the host's namespace) runs f right here.
func InNetns(nsPath string, f func()) error {
	if nsPath == "" {
		f()
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening own network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening network namespace: %w", err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", nsPath, err)
			return
		}
		f()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- nil
	}()
	return <-errc
}

// initNetnsIno is the nsfs inode of the initial network namespace, the
// one the host's interfaces are in: the kernel gives it a fixed number
// (PROC_NET_INIT_INO in include/linux/proc_ns.h, since Linux 3.8;
// ARCHITECTURE.md, "Kernel facts the code relies on"), so a process can
// tell it is there without reading another process's namespace.
const initNetnsIno = 0xEFFFFFF9

// HostNetns is the network namespace of procRoot's pid 1 (the host's, for
// an agent in a pod with the host's pid namespace and its own network
// namespace: the chart's default), when it is not the caller's own: where
// the interfaces are that pods' programs attach to. "" when it is the
// caller's, or absent. refused is the kernel's refusal to stat it,
// whatever refused it (a ptrace-mode check: a pid 1 more capable than the
// caller, a dropped capability, an LSM such as AppArmor or SELinux), where
// the refusal changes the answer: the answer is then "", the caller's own,
// a guess the caller must say is one. A caller in the initial network
// namespace gets no refusal: its own namespace is the host's.
func HostNetns(procRoot string) (nsPath string, refused error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := procRoot + "/1/ns/net"
	var self, host unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &self) != nil {
		return "", nil
	}
	switch err := unix.Stat(p, &host); {
	case (err == unix.EACCES || err == unix.EPERM) && self.Ino == initNetnsIno:
		return "", nil
	case err == unix.EACCES || err == unix.EPERM:
		return "", fmt.Errorf("reading the host's network namespace %s: %w", p, err)
	case err != nil, self.Dev == host.Dev && self.Ino == host.Ino:
		return "", nil
	}
	return p, nil
}

// NetnsContainers finds, for the network namespaces that have an id in the
// calling thread's namespace (the namespaces of its interfaces' peers:
// Netdev.PeerNetnsID), the container or pod whose processes are in each:
// one walk of procRoot's processes (a stat each), then per namespace one
// RTM_GETNSID and the cgroup of its first process in a container. A
// namespace none of whose processes is in a container maps to the zero
// Container.
func NetnsContainers(procRoot string) (map[int32]Container, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return nil, fmt.Errorf("reading own network namespace: %w", err)
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening a netlink socket: %w", err)
	}
	defer unix.Close(s)
	type nsKey struct{ dev, ino uint64 }
	// ids holds each namespace seen: its id (-1: none here, or not
	// readable) and whether a process of it named its container.
	type nsState struct {
		id   int32
		done bool
	}
	seen := map[nsKey]*nsState{{self.Dev, self.Ino}: {id: -1, done: true}}
	out := map[int32]Container{}
	buf := make([]byte, 4096)
	for _, e := range ents {
		if _, ok := parseUint32([]byte(e.Name())); !ok {
			continue
		}
		dir := procRoot + "/" + e.Name()
		var st unix.Stat_t
		if unix.Stat(dir+"/ns/net", &st) != nil {
			continue
		}
		k := nsKey{st.Dev, st.Ino}
		ns := seen[k]
		if ns == nil {
			ns = &nsState{id: -1}
			seen[k] = ns
			if id, err := netnsID(s, dir+"/ns/net", buf); err == nil && id >= 0 {
				ns.id = id
				out[id] = Container{}
			}
			ns.done = ns.id < 0
		}
		if ns.done {
			continue
		}
		b, err := os.ReadFile(dir + "/cgroup")
		if err != nil {
			continue
		}
		if c, _ := ContainerOf(ParseProcCgroup(b)); c.PodUID != "" || c.ID != "" {
			out[ns.id] = c
			ns.done = c.PodUID != "" // a pod's: its pause process or any of its containers names it
		}
	}
	return out, nil
}

// netnsID asks the kernel (RTM_GETNSID over socket s) for the id the
// calling thread's namespace gives the namespace at nsPath: -1 when it has
// none.
func netnsID(s int, nsPath string, buf []byte) (int32, error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	const rtgenLen = 4 // struct rtgenmsg, aligned
	attr := make([]byte, 8)
	binary.NativeEndian.PutUint16(attr[0:], 8)
	binary.NativeEndian.PutUint16(attr[2:], unix.NETNSA_FD)
	binary.NativeEndian.PutUint32(attr[4:], uint32(fd))
	msg := make([]byte, unix.SizeofNlMsghdr+rtgenLen, unix.SizeofNlMsghdr+rtgenLen+len(attr))
	msg = append(msg, attr...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_GETNSID)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	msg[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, err
	}
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		return -1, err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return -1, err
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if e := int32(nativeUint32(m.Data[0:4])); e != 0 {
					return -1, syscall.Errno(-e)
				}
			}
		case unix.RTM_NEWNSID:
			id := int32(-1)
			if len(m.Data) >= rtgenLen {
				nlAttrs(m.Data[rtgenLen:], func(typ uint16, v []byte) {
					if typ == unix.NETNSA_NSID && len(v) >= 4 {
						id = int32(nativeUint32(v))
					}
				})
			}
			return id, nil
		}
	}
	return -1, errors.New("no RTM_NEWNSID answer")
}

// CgroupPath returns the directory of the cgroup whose id (a cgroup link's
// cgroup_id: the kernfs node id, the directory's inode number) is id, on
// the cgroup2 mount at mount: open_by_handle_at with a kernfs file handle,
// then the path of the fd. Needs CAP_DAC_READ_SEARCH; a cgroup removed
// since answers ESTALE.
func CgroupPath(mount string, id uint64) (string, error) {
	mfd, err := unix.Open(mount, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening the cgroup2 mount: %w", err)
	}
	defer unix.Close(mfd)
	const fileIDKernfs = 0xfe // FILEID_KERNFS: the handle is the node id
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileIDKernfs, binary.NativeEndian.AppendUint64(nil, id)), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("opening cgroup %d by handle: %w", id, err)
	}
	defer unix.Close(fd)
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("reading the path of cgroup %d: %w", id, err)
	}
	return p, nil
}
