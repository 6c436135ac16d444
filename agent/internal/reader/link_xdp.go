package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeXDP decodes an XDP link: the interface (targets.go names it and
// its class).
func (r *Reader) decodeXDP(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = "xdp"
	r.netdevTarget(l, info.U32(bpfsys.LinkIfindex))
}
