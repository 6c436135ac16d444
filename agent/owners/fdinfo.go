package owners

import "github.com/bpfleet/bpfleet/internal/bpfsys"

// parseUint32 parses a non-empty decimal number that fits in 32 bits,
// without allocating: the /proc walk calls it for every pid and fd name.
func parseUint32(b []byte) (uint32, bool) {
	v, ok := bpfsys.ParseUint64(b)
	if !ok || v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}
