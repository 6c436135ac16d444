package bpfsys

import "unsafe"

// The decoding of struct bpf_link_info: one function for every link type,
// turning the union's bytes into plain typed fields. Naming them (an
// interface's name, a BTF function's, a cgroup's path) needs state the
// kernel ABI has not and is the reader's.

// LinkInfo is struct bpf_link_info: a header and a union, read through the
// accessors below. The union is sized for current kernels; older ones fill
// less and say so in info_len.
type LinkInfo struct {
	Type   uint32
	ID     uint32
	ProgID uint32
	_      uint32
	U      [64]byte
}

func (l *LinkInfo) U32(off int) uint32 { return *(*uint32)(unsafe.Pointer(&l.U[off])) }
func (l *LinkInfo) U64(off int) uint64 { return *(*uint64)(unsafe.Pointer(&l.U[off])) }
func (l *LinkInfo) SetU64(off int, v uint64) {
	*(*uint64)(unsafe.Pointer(&l.U[off])) = v
}
func (l *LinkInfo) SetU32(off int, v uint32) {
	*(*uint32)(unsafe.Pointer(&l.U[off])) = v
}

// Offsets inside the union (from the start of U).
const (
	// raw_tracepoint: tp_name (ptr), tp_name_len
	LinkRawTPName    = 0
	LinkRawTPNameLen = 8
	// tracing: attach_type, target_obj_id, target_btf_id
	LinkTracingAttachType = 0
	LinkTracingTargetObj  = 4
	LinkTracingTargetBTF  = 8
	// cgroup: cgroup_id (u64), attach_type
	LinkCgroupID         = 0
	LinkCgroupAttachType = 8
	// iter: target_name (ptr), target_name_len
	LinkIterName    = 0
	LinkIterNameLen = 8
	// netns: netns_ino, attach_type
	LinkNetnsIno        = 0
	LinkNetnsAttachType = 4
	// xdp / tcx / netkit: ifindex (, attach_type); sockmap: map_id,
	// attach_type
	LinkIfindex      = 0
	LinkSockmapMapID = 0
	LinkIfAttachType = 4
	// kprobe_multi: addrs, count, flags, missed
	LinkKMultiCount  = 8
	LinkKMultiFlags  = 12
	LinkKMultiMissed = 16
	// uprobe_multi: path, offsets, ref_ctr_offsets, cookies, path_size, count, flags, pid
	LinkUMultiPath     = 0
	LinkUMultiPathSize = 32
	LinkUMultiCount    = 36
	LinkUMultiFlags    = 40
	// perf_event: type, then a union at 8
	LinkPerfType = 0
	// perf_event.{kprobe,uprobe,tracepoint}: name ptr at 8, name_len at 16
	LinkPerfName    = 8
	LinkPerfNameLen = 16
	LinkPerfOffset  = 20
	// perf_event.kprobe.missed
	LinkPerfKprobeMissed = 32
	// netfilter: pf, hooknum, priority
	LinkNFPf       = 0
	LinkNFHooknum  = 4
	LinkNFPriority = 8
)

// A kernel exposes kprobe missed counters (perf_event kprobe and
// kprobe_multi links) exactly when its bpf_link_info reaches the end of
// perf_event.kprobe.missed: both were added together, and nothing before
// them made the union that large.
const LinkInfoEndKprobeMissed = 16 + LinkPerfKprobeMissed + 8

// Link types (enum bpf_link_type).
const (
	LinkTypeRawTracepoint = 1
	LinkTypeTracing       = 2
	LinkTypeCgroup        = 3
	LinkTypeIter          = 4
	LinkTypeNetns         = 5
	LinkTypeXDP           = 6
	LinkTypePerfEvent     = 7
	LinkTypeKprobeMulti   = 8
	LinkTypeStructOps     = 9
	LinkTypeNetfilter     = 10
	LinkTypeTCX           = 11
	LinkTypeUprobeMulti   = 12
	LinkTypeNetkit        = 13
	LinkTypeSockmap       = 14
)

// perf_event link kinds (enum bpf_perf_event_type).
const (
	PerfEventUprobe     = 1
	PerfEventUretprobe  = 2
	PerfEventKprobe     = 3
	PerfEventKretprobe  = 4
	PerfEventTracepoint = 5
)

// LinkNameFunc asks for one of a link's name strings, which the kernel
// hands out only into a buffer: ptrOff and lenOff are the offsets, in
// bpf_link_info's union, of the buffer's pointer and length. On the
// syscall path it is a second OBJ_GET_INFO; on the iterator's, the
// record's name.
type LinkNameFunc func(ptrOff, lenOff int) string

// LinkDetail is a bpf_link_info decoded. Which fields a link type fills is
// said beside each; the rest stay zero.
type LinkDetail struct {
	Type, ID, ProgID uint32
	// AttachType is the bpf_attach_type (cgroup, tracing, netns, tcx,
	// netkit, sockmap links).
	AttachType uint32
	// Name is the name string the kernel hands out into a buffer: a raw
	// tracepoint's or a perf_event tracepoint's or probe's name, an
	// iterator's target, a uprobe's binary.
	Name string
	// Ifindex is the interface of an XDP, tcx or netkit link (0: gone).
	Ifindex uint32
	// CgroupID is a cgroup link's cgroup.
	CgroupID uint64
	// TargetObjID and TargetBTFID are a tracing link's BTF object (0:
	// vmlinux) and function.
	TargetObjID, TargetBTFID uint32
	// NetnsIno is a netns link's namespace inode.
	NetnsIno uint32
	// MapID is a sockmap link's map.
	MapID uint32
	// Return says a kprobe_multi or uprobe_multi link probes returns.
	Return bool
	// Count is how many functions a kprobe_multi link probes.
	Count uint32
	// PerfType is a perf_event link's kind (PerfEvent*; 0 before 6.6,
	// whose kernels give no perf_event details).
	PerfType uint32
	// Offset is a perf_event kprobe's offset into its function.
	Offset uint32
	// Pf, Hooknum and Priority are a netfilter link's.
	Pf, Hooknum uint32
	Priority    int32
	// MissedKnown says the kernel reports a kprobe link's (perf_event
	// kprobe, kprobe_multi) missed counter; Missed is its value.
	MissedKnown bool
	Missed      uint64
}

// DecodeLink decodes info, n bytes of which the kernel filled, asking name
// for the name string of a link type that has one (and only then: on the
// syscall path each asking is a syscall).
func DecodeLink(info *LinkInfo, n uint32, name LinkNameFunc) LinkDetail {
	d := LinkDetail{Type: info.Type, ID: info.ID, ProgID: info.ProgID}
	switch info.Type {
	case LinkTypeRawTracepoint:
		d.Name = name(LinkRawTPName, LinkRawTPNameLen)
	case LinkTypeTracing:
		d.AttachType = info.U32(LinkTracingAttachType)
		d.TargetObjID, d.TargetBTFID = info.U32(LinkTracingTargetObj), info.U32(LinkTracingTargetBTF)
	case LinkTypeCgroup:
		d.CgroupID, d.AttachType = info.U64(LinkCgroupID), info.U32(LinkCgroupAttachType)
	case LinkTypeIter:
		d.Name = name(LinkIterName, LinkIterNameLen)
	case LinkTypeNetns:
		d.NetnsIno, d.AttachType = info.U32(LinkNetnsIno), info.U32(LinkNetnsAttachType)
	case LinkTypeXDP:
		d.Ifindex = info.U32(LinkIfindex)
	case LinkTypeTCX, LinkTypeNetkit: // one layout
		d.Ifindex, d.AttachType = info.U32(LinkIfindex), info.U32(LinkIfAttachType)
	case LinkTypeSockmap:
		d.MapID, d.AttachType = info.U32(LinkSockmapMapID), info.U32(LinkIfAttachType)
	case LinkTypeKprobeMulti:
		d.Return = info.U32(LinkKMultiFlags)&1 != 0 // BPF_F_KPROBE_MULTI_RETURN
		d.Count = info.U32(LinkKMultiCount)
		d.MissedKnown = n >= LinkInfoEndKprobeMissed
	case LinkTypeUprobeMulti:
		d.Return = info.U32(LinkUMultiFlags)&1 != 0 // BPF_F_UPROBE_MULTI_RETURN
		d.Name = name(LinkUMultiPath, LinkUMultiPathSize)
	case LinkTypePerfEvent:
		d.PerfType = info.U32(LinkPerfType)
		if d.PerfType >= PerfEventUprobe && d.PerfType <= PerfEventTracepoint {
			d.Name = name(LinkPerfName, LinkPerfNameLen)
		}
		if d.PerfType == PerfEventKprobe || d.PerfType == PerfEventKretprobe {
			d.Offset = info.U32(LinkPerfOffset)
			d.MissedKnown = n >= LinkInfoEndKprobeMissed
		}
	case LinkTypeNetfilter:
		d.Pf, d.Hooknum = info.U32(LinkNFPf), info.U32(LinkNFHooknum)
		d.Priority = int32(info.U32(LinkNFPriority))
	}
	if d.MissedKnown {
		d.Missed = info.KprobeMissed()
	}
	return d
}

// KprobeMissed is a kprobe link's missed counter (perf_event kprobe or
// kprobe_multi), for a link whose LinkDetail says MissedKnown: what a scan
// reads again on every pass, without decoding the rest.
func (l *LinkInfo) KprobeMissed() uint64 {
	switch l.Type {
	case LinkTypePerfEvent:
		return l.U64(LinkPerfKprobeMissed)
	case LinkTypeKprobeMulti:
		return l.U64(LinkKMultiMissed)
	}
	return 0
}
