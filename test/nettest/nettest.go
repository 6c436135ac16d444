// Package nettest makes the network set-ups tests attach programs to, with
// plain NETLINK_ROUTE requests (no iproute2 needed): veth pairs with one end
// in another network namespace, clsact qdiscs with cls_bpf filters, XDP
// programs attached the legacy way. Test-only.
package nettest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Attr is one netlink attribute, padded to 4 bytes.
func Attr(typ uint16, v []byte) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b[0:], uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// U32 is v in native byte order.
func U32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// Request sends one NETLINK_ROUTE request in the calling thread's network
// namespace and waits for its ack.
func Request(typ, flags uint16, body []byte) error {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg = append(msg, body...)
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		return err
	}
	if n >= unix.SizeofNlMsghdr+4 && binary.NativeEndian.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if e := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); e != 0 {
			return syscall.Errno(-e)
		}
	}
	return nil
}

// ifinfomsg is a struct ifinfomsg for ifindex (0: none).
func ifinfomsg(ifindex int) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	return b
}

// AddVeth creates a veth pair: name in the calling thread's network
// namespace, peer in the network namespace of process peerPID, as a CNI
// plugin wires a pod (`ip link add NAME type veth peer name PEER netns
// PID`).
func AddVeth(name, peer string, peerPID int) error {
	p := append(ifinfomsg(0), Attr(unix.IFLA_IFNAME, append([]byte(peer), 0))...)
	p = append(p, Attr(unix.IFLA_NET_NS_PID, U32(uint32(peerPID)))...)
	info := append(Attr(unix.IFLA_INFO_KIND, []byte("veth")), Attr(unix.IFLA_INFO_DATA|unix.NLA_F_NESTED, Attr(1 /* VETH_INFO_PEER */, p))...)
	body := append(ifinfomsg(0), Attr(unix.IFLA_IFNAME, append([]byte(name), 0))...)
	body = append(body, Attr(unix.IFLA_LINKINFO|unix.NLA_F_NESTED, info)...)
	if err := Request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body); err != nil {
		return fmt.Errorf("adding veth %s (peer %s in the netns of pid %d): %w", name, peer, peerPID, err)
	}
	return nil
}

// Tcmsg is a struct tcmsg.
func Tcmsg(ifindex int, handle, parent, info uint32) []byte {
	b := make([]byte, 20)
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	binary.NativeEndian.PutUint32(b[8:], handle)
	binary.NativeEndian.PutUint32(b[12:], parent)
	binary.NativeEndian.PutUint32(b[16:], info)
	return b
}

// Netlink tc attributes and handles (linux/rtnetlink.h, pkt_sched.h).
const (
	TcaKind    = 1
	TcaOptions = 2
	// ClsactIngress is TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS).
	ClsactIngress = 0xFFFFFFF2
	ethPAll       = 0x0300 // htons(ETH_P_ALL)
)

// AddClsBPF adds a clsact qdisc to ifindex and prog (an fd) as a
// direct-action cls_bpf filter on its ingress, as `tc filter add ... bpf
// da` does: the qdisc holds the program, no fd is kept.
func AddClsBPF(ifindex int, fd int) error {
	q := append(Tcmsg(ifindex, 0xFFFF0000, 0xFFFFFFF1 /* TC_H_CLSACT */, 0), Attr(TcaKind, []byte("clsact\x00"))...)
	if err := Request(unix.RTM_NEWQDISC, unix.NLM_F_CREATE|unix.NLM_F_EXCL, q); err != nil {
		return fmt.Errorf("adding clsact: %w", err)
	}
	opts := append(append(Attr(6 /* TCA_BPF_FD */, U32(uint32(fd))), Attr(7 /* TCA_BPF_NAME */, []byte("nettest\x00"))...),
		Attr(8 /* TCA_BPF_FLAGS */, U32(1 /* TCA_BPF_FLAG_ACT_DIRECT */))...)
	f := append(Tcmsg(ifindex, 1, ClsactIngress, 1<<16|ethPAll), Attr(TcaKind, []byte("bpf\x00"))...)
	f = append(f, Attr(TcaOptions|unix.NLA_F_NESTED, opts)...)
	if err := Request(unix.RTM_NEWTFILTER, unix.NLM_F_CREATE|unix.NLM_F_EXCL, f); err != nil {
		return fmt.Errorf("adding cls_bpf filter: %w", err)
	}
	return nil
}

// SetXDP attaches prog (an fd) to ifindex in generic (skb) mode with the
// legacy netlink API, which leaves no bpf_link and no fd behind.
func SetXDP(ifindex int, fd int) error {
	xdp := append(Attr(1 /* IFLA_XDP_FD */, U32(uint32(fd))), Attr(3 /* IFLA_XDP_FLAGS */, U32(2 /* XDP_FLAGS_SKB_MODE */))...)
	body := append(ifinfomsg(ifindex), Attr(unix.IFLA_XDP|unix.NLA_F_NESTED, xdp)...)
	return Request(unix.RTM_SETLINK, 0, body)
}

// ErrNoNetns is returned by InFreshNetns when the kernel refused a private
// network namespace (no CAP_SYS_ADMIN, or namespaces off).
var ErrNoNetns = errors.New("no private network namespace")

// InFreshNetns runs fn on a locked thread in a new network namespace (its
// loopback is ifindex 1), then returns the thread to the caller's namespace.
// ns is the new namespace's fd, open while fn runs: a test that needs the
// namespace after fn returns (links on its devices) keeps a dup of it. A
// thread that cannot go back stays locked and dies with its goroutine.
func InFreshNetns(fn func(ns int)) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("opening own network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("%w: %w", ErrNoNetns, err)
			return
		}
		ns, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			fn(ns)
			unix.Close(ns)
		}
		if err2 := unix.Setns(orig, unix.CLONE_NEWNET); err2 != nil {
			errc <- errors.Join(err, fmt.Errorf("returning to own network namespace: %w", err2))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}
