package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeRawTracepoint decodes a raw_tracepoint link: the tracepoint's name.
func decodeRawTracepoint(l *Link, name linkNameFunc) {
	l.AttachType = "raw_tp" // tp_btf is told apart in join, by program type
	l.Target = name(bpfsys.LinkRawTPName, bpfsys.LinkRawTPNameLen)
}
