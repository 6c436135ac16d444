package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeIter decodes an iterator link: the iterator's target name.
func decodeIter(l *Link, name linkNameFunc) {
	l.AttachType = "iter"
	l.Target = name(bpfsys.LinkIterName, bpfsys.LinkIterNameLen)
}
