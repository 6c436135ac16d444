package reader

import (
	"fmt"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeNetfilter decodes a netfilter link: protocol family, hook and
// priority.
func decodeNetfilter(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = "netfilter"
	l.Target = fmt.Sprintf("pf %d hook %d prio %d", info.U32(bpfsys.LinkNFPf), info.U32(bpfsys.LinkNFHooknum), int32(info.U32(bpfsys.LinkNFPriority)))
}
