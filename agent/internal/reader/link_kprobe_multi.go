package reader

import (
	"strconv"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeKprobeMulti decodes a kprobe_multi link: entry or return, and how
// many functions it probes. Its missed counter changes, so the link is
// read again on every scan when the kernel reports it.
func decodeKprobeMulti(c *linkStatic, info *bpfsys.LinkInfo, n uint32) {
	l := &c.link
	l.AttachType = "kprobe.multi"
	if info.U32(bpfsys.LinkKMultiFlags)&1 != 0 { // BPF_F_KPROBE_MULTI_RETURN
		l.AttachType = "kretprobe.multi"
	}
	l.Target = strconv.FormatUint(uint64(info.U32(bpfsys.LinkKMultiCount)), 10) + " functions"
	c.dynamic = true
	c.missedKnown = n >= bpfsys.LinkInfoEndKprobeMissed
}
