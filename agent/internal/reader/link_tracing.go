package reader

import (
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// decodeTracing decodes a tracing link (fentry, fexit, fmod_ret, lsm,
// iterators of BTF types...): its attach type and the BTF function it is
// attached to.
func (r *Reader) decodeTracing(l *Link, info *bpfsys.LinkInfo) {
	l.AttachType = AttachTypeName(info.U32(bpfsys.LinkTracingAttachType))
	obj, typ := info.U32(bpfsys.LinkTracingTargetObj), info.U32(bpfsys.LinkTracingTargetBTF)
	l.Target = r.btf.name(obj, typ)
}
