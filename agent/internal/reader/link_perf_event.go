package reader

import (
	"strconv"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodePerfEvent decodes a perf_event link: its kind (uprobe, kprobe,
// tracepoint...) and the probed name; a kprobe's offset, and its missed
// counter, read again on every scan when the kernel reports it.
func decodePerfEvent(c *linkStatic, info *bpfsys.LinkInfo, n uint32, name linkNameFunc) {
	l := &c.link
	pt := info.U32(bpfsys.LinkPerfType)
	l.AttachType = "perf_event"
	if int(pt) < len(perfEventAttachNames) {
		l.AttachType = perfEventAttachNames[pt]
	}
	if pt >= 1 && pt <= 5 { // uprobe, uretprobe, kprobe, kretprobe, tracepoint
		l.Target = name(bpfsys.LinkPerfName, bpfsys.LinkPerfNameLen)
	}
	if pt == perfEventUprobe || pt == perfEventUretprobe { // a binary's path
		l.TargetClass = pathClass(l.Target)
	}
	if pt == perfEventKprobe || pt == perfEventKretprobe {
		if off := info.U32(bpfsys.LinkPerfOffset); off != 0 && l.Target != "" {
			l.Target += "+0x" + strconv.FormatUint(uint64(off), 16)
		}
		c.dynamic = true
		c.missedKnown = n >= bpfsys.LinkInfoEndKprobeMissed
	}
}
