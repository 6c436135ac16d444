package reader

import (
	"fmt"
	"strconv"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// newLinkStatic names a decoded link's fields (bpfsys.DecodeLink): its
// attach type and target, with the lookups that need the reader's state —
// an interface's name, a cgroup's path, a BTF function's name — done once,
// as a link's attachment never changes.
func (r *Reader) newLinkStatic(d *bpfsys.LinkDetail) *linkStatic {
	c := &linkStatic{link: Link{ID: d.ID, ProgID: d.ProgID, Type: LinkTypeName(d.Type)}}
	l := &c.link
	switch d.Type {
	case bpfsys.LinkTypeRawTracepoint:
		l.AttachType = "raw_tp" // tp_btf is told apart in join, by program type
		l.Target = d.Name
	case bpfsys.LinkTypeTracing: // fentry, fexit, fmod_ret, lsm, freplace...
		l.AttachType = AttachTypeName(d.AttachType)
		l.Target = r.btf.name(d.TargetObjID, d.TargetBTFID)
	case bpfsys.LinkTypeCgroup:
		l.AttachType = AttachTypeName(d.AttachType)
		r.cgroupTarget(l, d.CgroupID) // targets.go
	case bpfsys.LinkTypeIter:
		l.AttachType = "iter"
		l.Target = d.Name
	case bpfsys.LinkTypeNetns, bpfsys.LinkTypeSockmap: // the attach type only
		l.AttachType = AttachTypeName(d.AttachType)
	case bpfsys.LinkTypeXDP:
		l.AttachType = "xdp"
		r.netdevTarget(l, d.Ifindex) // targets.go
	case bpfsys.LinkTypeTCX, bpfsys.LinkTypeNetkit: // ingress, egress, peer...
		l.AttachType = AttachTypeName(d.AttachType)
		r.netdevTarget(l, d.Ifindex)
	case bpfsys.LinkTypeKprobeMulti:
		l.AttachType = "kprobe.multi"
		if d.Return {
			l.AttachType = "kretprobe.multi"
		}
		l.Target = strconv.FormatUint(uint64(d.Count), 10) + " functions"
		// Its missed counter changes: the link is read again on every
		// scan when the kernel reports it.
		c.dynamic, c.missedKnown = true, d.MissedKnown
	case bpfsys.LinkTypeUprobeMulti:
		l.AttachType = "uprobe.multi"
		if d.Return {
			l.AttachType = "uretprobe.multi"
		}
		l.Target = d.Name
		l.TargetClass = pathClass(l.Target)
	case bpfsys.LinkTypePerfEvent:
		namePerfEvent(c, d)
	case bpfsys.LinkTypeNetfilter:
		l.AttachType = "netfilter"
		l.Target = fmt.Sprintf("pf %d hook %d prio %d", d.Pf, d.Hooknum, d.Priority)
	case bpfsys.LinkTypeStructOps:
		l.AttachType = "struct_ops"
	default:
		l.AttachType = l.Type
	}
	return c
}

// namePerfEvent names a perf_event link: its kind (uprobe, kprobe,
// tracepoint...) and the probed name; a kprobe's offset, and its missed
// counter, read again on every scan when the kernel reports it.
func namePerfEvent(c *linkStatic, d *bpfsys.LinkDetail) {
	l := &c.link
	l.AttachType = "perf_event"
	if int(d.PerfType) < len(perfEventAttachNames) {
		l.AttachType = perfEventAttachNames[d.PerfType]
	}
	l.Target = d.Name
	switch d.PerfType {
	case bpfsys.PerfEventUprobe, bpfsys.PerfEventUretprobe: // a binary's path
		l.TargetClass = pathClass(l.Target)
	case bpfsys.PerfEventKprobe, bpfsys.PerfEventKretprobe:
		if d.Offset != 0 && l.Target != "" {
			l.Target += "+0x" + strconv.FormatUint(uint64(d.Offset), 16)
		}
		c.dynamic, c.missedKnown = true, d.MissedKnown
	}
}

// NamePerfAttachments names a program attached through perf_event fds with
// no link (PERF_EVENT_IOC_SET_BPF; owners.PerfAttachment holds the
// kernel's BPF_TASK_FD_QUERY answer) exactly as the perf_event link of
// the same probe is named (namePerfEvent): the same attach type, target
// and class on a 5.10 kernel, which has no such link, as on a 6.x one.
// Several fds (one probe attached by several processes) are joined as a
// program's links are. What only a link has (its id, a kprobe's missed
// counter) has no place here and stays absent. as must not be empty.
func NamePerfAttachments(as []owners.PerfAttachment) (attachType, target, class string) {
	links := make([]Link, len(as))
	for i := range as {
		links[i] = perfAttachmentLink(&as[i])
	}
	return links[0].AttachType, joinTargets(links), JoinClasses(links)
}

// perfAttachmentLink is the link a perf_event link of a's probe would be,
// decoded: the query's fd type is the link's perf_event kind. Where the
// kernel did not describe the fd (a perf_event program on a hardware or
// software event) the kind is 0, named "perf_event", as such a link's.
func perfAttachmentLink(a *owners.PerfAttachment) Link {
	d := bpfsys.LinkDetail{Type: bpfsys.LinkTypePerfEvent, ProgID: a.Query.ProgID}
	if a.Known {
		d.PerfType = a.Query.PerfEventType()
		d.Name = a.Query.Name
		d.Offset = uint32(a.Query.Offset) // the link's is a u32 too
	}
	var c linkStatic
	namePerfEvent(&c, &d)
	return c.link
}
