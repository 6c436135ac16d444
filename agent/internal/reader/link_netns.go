package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeNetns decodes a network namespace link: its attach type only.
func decodeNetns(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = AttachTypeName(info.U32(bpfsys.LinkNetnsAttachType))
}
