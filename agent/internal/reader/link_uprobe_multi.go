package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeUprobeMulti decodes a uprobe_multi link: entry or return, and the
// binary's path with its class.
func decodeUprobeMulti(l *Link, info *bpfsys.LinkInfo, name linkNameFunc) {
	l.AttachType = "uprobe.multi"
	if info.U32(bpfsys.LinkUMultiFlags)&1 != 0 { // BPF_F_UPROBE_MULTI_RETURN
		l.AttachType = "uretprobe.multi"
	}
	l.Target = name(bpfsys.LinkUMultiPath, bpfsys.LinkUMultiPathSize)
	l.TargetClass = pathClass(l.Target)
}
