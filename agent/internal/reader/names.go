package reader

import (
	"strconv"

	"github.com/cilium/ebpf"
)

// Kernel enum values are turned into the names users know: program types as
// bpftool prints them, attach types as libbpf's SEC() names.

var progTypeNames = [...]string{
	"unspec", "socket_filter", "kprobe", "sched_cls", "sched_act", "tracepoint",
	"xdp", "perf_event", "cgroup_skb", "cgroup_sock", "lwt_in", "lwt_out",
	"lwt_xmit", "sock_ops", "sk_skb", "cgroup_device", "sk_msg",
	"raw_tracepoint", "cgroup_sock_addr", "lwt_seg6local", "lirc_mode2",
	"sk_reuseport", "flow_dissector", "cgroup_sysctl",
	"raw_tracepoint_writable", "cgroup_sockopt", "tracing", "struct_ops",
	"ext", "lsm", "sk_lookup", "syscall", "netfilter",
}

const (
	progTypePerfEvent     = 7
	progTypeRawTracepoint = 17
	progTypeTracing       = 26
	progTypeStructOps     = 27
	progTypeExt           = 28
	progTypeLSM           = 29
)

// ProgType is the bpf_prog_type ProgTypeName calls name
// (ebpf.UnspecifiedProgram for a name it does not know).
func ProgType(name string) ebpf.ProgramType {
	for i, n := range progTypeNames {
		if n == name {
			return ebpf.ProgramType(i)
		}
	}
	return ebpf.UnspecifiedProgram
}

// ProgTypeName names a bpf_prog_type.
func ProgTypeName(t uint32) string { return enumName(progTypeNames[:], t, "type_") }

// attachTypeNames names enum bpf_attach_type the way SEC() and bpftool do.
var attachTypeNames = [...]string{
	"cgroup_inet_ingress", "cgroup_inet_egress", "cgroup_inet_sock_create",
	"cgroup_sock_ops", "sk_skb_stream_parser", "sk_skb_stream_verdict",
	"cgroup_device", "sk_msg_verdict", "cgroup_inet4_bind", "cgroup_inet6_bind",
	"cgroup_inet4_connect", "cgroup_inet6_connect", "cgroup_inet4_post_bind",
	"cgroup_inet6_post_bind", "cgroup_udp4_sendmsg", "cgroup_udp6_sendmsg",
	"lirc_mode2", "flow_dissector", "cgroup_sysctl", "cgroup_udp4_recvmsg",
	"cgroup_udp6_recvmsg", "cgroup_getsockopt", "cgroup_setsockopt",
	"tp_btf", "fentry", "fexit", "fmod_ret", "lsm", "iter",
	"cgroup_inet4_getpeername", "cgroup_inet6_getpeername",
	"cgroup_inet4_getsockname", "cgroup_inet6_getsockname", "xdp_devmap",
	"cgroup_inet_sock_release", "xdp_cpumap", "sk_lookup", "xdp",
	"sk_skb_verdict", "sk_reuseport_select", "sk_reuseport_select_or_migrate",
	"perf_event", "kprobe.multi", "lsm_cgroup", "struct_ops", "netfilter",
	"tcx_ingress", "tcx_egress", "uprobe.multi", "cgroup_unix_connect",
	"cgroup_unix_sendmsg", "cgroup_unix_recvmsg", "cgroup_unix_getpeername",
	"cgroup_unix_getsockname", "netkit_primary", "netkit_peer",
	"kprobe.session", "uprobe.session",
}

const (
	attachTraceRawTP   = 23
	attachTraceFentry  = 24
	attachTraceFexit   = 25
	attachModifyReturn = 26
	attachLSMMac       = 27
)

// AttachTypeName names a bpf_attach_type.
func AttachTypeName(t uint32) string { return enumName(attachTypeNames[:], t, "attach_") }

var linkTypeNames = [...]string{
	"unspec", "raw_tracepoint", "tracing", "cgroup", "iter", "netns", "xdp",
	"perf_event", "kprobe_multi", "struct_ops", "netfilter", "tcx",
	"uprobe_multi", "netkit", "sockmap",
}

// LinkTypeName names a bpf_link_type.
func LinkTypeName(t uint32) string { return enumName(linkTypeNames[:], t, "link_") }

// perf_event link kinds (enum bpf_perf_event_type).
var perfEventAttachNames = [...]string{
	"perf_event", "uprobe", "uretprobe", "kprobe", "kretprobe", "tracepoint", "perf_event",
}

// Unattached is the attach type of a program that no link or attachment
// names.
const Unattached = "unattached"

// tracingAttachName names the attach type of a tracing-family program from
// its expected attach type, telling sleepable fentry from fentry.
func tracingAttachName(expected uint32, sleepable *bool) string {
	name := AttachTypeName(expected)
	if sleepable != nil && *sleepable {
		switch expected {
		case attachTraceFentry, attachTraceFexit, attachModifyReturn, attachLSMMac, attachTraceRawTP:
			return name + ".s"
		}
	}
	return name
}

// TrampolineAttach reports whether an attach type runs through a BPF
// trampoline (which disables migration, not preemption).
func TrampolineAttach(name string) bool {
	switch name {
	case "fentry", "fexit", "fmod_ret", "fentry.s", "fexit.s", "fmod_ret.s", "lsm", "lsm.s":
		return true
	}
	return false
}

// enumName names value v of a kernel enum from its table, or prefix and the
// number for a value newer than the table.
func enumName(names []string, v uint32, prefix string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return prefix + strconv.FormatUint(uint64(v), 10)
}

// mapTypeNames names enum bpf_map_type as bpftool does.
var mapTypeNames = [...]string{
	"unspec", "hash", "array", "prog_array", "perf_event_array",
	"percpu_hash", "percpu_array", "stack_trace", "cgroup_array",
	"lru_hash", "lru_percpu_hash", "lpm_trie", "array_of_maps",
	"hash_of_maps", "devmap", "sockmap", "cpumap", "xskmap", "sockhash",
	"cgroup_storage", "reuseport_sockarray", "percpu_cgroup_storage",
	"queue", "stack", "sk_storage", "devmap_hash", "struct_ops", "ringbuf",
	"inode_storage", "task_storage", "bloom_filter", "user_ringbuf",
	"cgrp_storage", "arena",
}

// MapTypeName names a bpf_map_type.
func MapTypeName(t uint32) string { return enumName(mapTypeNames[:], t, "type_") }
