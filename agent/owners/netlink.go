package owners

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// nlAttrs calls f for each netlink attribute in b (type without the nested
// and byte-order flags). Truncated input ends the walk; it never panics.
func nlAttrs(b []byte, f func(typ uint16, v []byte)) {
	for len(b) >= 4 {
		l := int(nativeUint16(b[0:2]))
		typ := nativeUint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return
		}
		f(typ, b[4:l])
		l = (l + 3) &^ 3
		if l >= len(b) {
			return
		}
		b = b[l:]
	}
}

// netlinkDump sends one NETLINK_ROUTE dump request with the given header
// body and returns the reply messages of type want.
func netlinkDump(typ uint16, body []byte, want uint16) ([]syscall.NetlinkMessage, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer unix.Close(s)
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg = append(msg, body...)
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var out []syscall.NetlinkMessage
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parsing netlink reply: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(nativeUint32(m.Data[0:4])); e != 0 {
						return nil, syscall.Errno(-e)
					}
				}
				return out, nil
			case want:
				// Copy: buf is reused for the next read.
				m.Data = append([]byte(nil), m.Data...)
				out = append(out, m)
			}
		}
	}
}

// Traffic control handles and attributes (linux/pkt_sched.h, pkt_cls.h).
const (
	tcHClsactIngress = 0xFFFFFFF2 // TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)
	tcHClsactEgress  = 0xFFFFFFF3
	tcaKind          = 1
	tcaOptions       = 2
	tcaBPFID         = 11
	sizeofTcmsg      = 20
)

// tcFilters lists the cls_bpf programs on the clsact (or ingress) qdisc of
// one interface, for parent ingress or egress. A device without such a qdisc
// answers EINVAL or ENOENT: that means no programs, not an error.
func tcFilters(ifindex int, parent uint32) ([]uint32, error) {
	body := make([]byte, sizeofTcmsg)
	binary.NativeEndian.PutUint32(body[4:], uint32(ifindex))
	binary.NativeEndian.PutUint32(body[12:], parent)
	msgs, err := netlinkDump(unix.RTM_GETTFILTER, body, unix.RTM_NEWTFILTER)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		return nil, err
	}
	var ids []uint32
	for _, m := range msgs {
		if len(m.Data) < sizeofTcmsg {
			continue
		}
		kind := ""
		var opts []byte
		nlAttrs(m.Data[sizeofTcmsg:], func(typ uint16, v []byte) {
			switch typ {
			case tcaKind:
				kind = string(cstr(v))
			case tcaOptions:
				opts = v
			}
		})
		if kind != "bpf" {
			continue
		}
		nlAttrs(opts, func(typ uint16, v []byte) {
			if typ == tcaBPFID && len(v) >= 4 {
				ids = append(ids, nativeUint32(v))
			}
		})
	}
	return ids, nil
}

// tcParent is a qdisc or class of an egress tree that filters can hang on.
type tcParent struct {
	handle uint32
	kind   string // the qdisc's kind: htb, prio, fq_codel, ...
}

// tcEgressParents returns, per interface, the qdiscs and classes that may
// carry filters beyond clsact: those of classful trees such as htb or prio
// (`tc filter add dev eth0 parent 1:10 bpf ...`). Kernel-made qdiscs have
// handle 0 and cannot be addressed by a filter, so a node with default
// queueing costs one qdisc dump and no class dump.
func tcEgressParents() (map[int][]tcParent, error) {
	msgs, err := netlinkDump(unix.RTM_GETQDISC, make([]byte, sizeofTcmsg), unix.RTM_NEWQDISC)
	if err != nil {
		return nil, fmt.Errorf("dumping qdiscs: %w", err)
	}
	out := map[int][]tcParent{}
	for _, m := range msgs {
		ifindex, handle, kind, ok := parseTcmsg(m.Data)
		if !ok || handle>>16 == 0 || kind == "ingress" || kind == "clsact" {
			continue
		}
		out[ifindex] = append(out[ifindex], tcParent{handle, kind})
	}
	for ifindex, qs := range out {
		body := make([]byte, sizeofTcmsg)
		binary.NativeEndian.PutUint32(body[4:], uint32(ifindex))
		msgs, err := netlinkDump(unix.RTM_GETTCLASS, body, unix.RTM_NEWTCLASS)
		if err != nil {
			if errors.Is(err, unix.ENODEV) {
				delete(out, ifindex) // gone since the qdisc dump
				continue
			}
			return out, fmt.Errorf("dumping classes of interface %d: %w", ifindex, err)
		}
		for _, m := range msgs {
			if _, handle, kind, ok := parseTcmsg(m.Data); ok && handle>>16 != 0 {
				qs = append(qs, tcParent{handle, kind})
			}
		}
		out[ifindex] = qs
	}
	return out, nil
}

// parseTcmsg reads a tcmsg header and its TCA_KIND.
func parseTcmsg(b []byte) (ifindex int, handle uint32, kind string, ok bool) {
	if len(b) < sizeofTcmsg {
		return 0, 0, "", false
	}
	ifindex = int(int32(nativeUint32(b[4:8])))
	handle = nativeUint32(b[8:12])
	nlAttrs(b[sizeofTcmsg:], func(typ uint16, v []byte) {
		if typ == tcaKind {
			kind = string(cstr(v))
		}
	})
	return ifindex, handle, kind, true
}

// tcHandle formats a handle as tc prints it: "1:", "1:10".
func tcHandle(h uint32) string {
	major, minor := h>>16, h&0xffff
	if minor == 0 {
		return fmt.Sprintf("%x:", major)
	}
	return fmt.Sprintf("%x:%x", major, minor)
}
