package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeSockmap decodes a sockmap link: its attach type (the map is not
// named).
func decodeSockmap(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = AttachTypeName(info.U32(bpfsys.LinkIfAttachType))
}
