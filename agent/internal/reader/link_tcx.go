package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeTCX decodes a tcx or netkit link, which share their layout: the
// attach type (ingress, egress, peer...) and the interface.
func (r *Reader) decodeTCX(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = AttachTypeName(info.U32(bpfsys.LinkIfAttachType))
	r.netdevTarget(l, info.U32(bpfsys.LinkIfindex))
}
