package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeCgroup decodes a cgroup link: its attach type and the cgroup
// (targets.go names it and its class).
func (r *Reader) decodeCgroup(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = AttachTypeName(info.U32(bpfsys.LinkCgroupAttachType))
	r.cgroupTarget(l, info.U64(bpfsys.LinkCgroupID))
}
