package owners

// FDInfo is what /proc/PID/fdinfo/FD says about a BPF fd. A program fd has
// ProgID set; a link fd has LinkID and (for links with a program) ProgID.
type FDInfo struct {
	ProgID uint32
	LinkID uint32
}

// ParseFDInfo reads the prog_id: and link_id: lines of an fdinfo file.
// Every other line, and any value that is not a decimal uint32, is ignored:
// fdinfo grows new lines with kernel versions and must never break us.
func ParseFDInfo(b []byte) FDInfo {
	var fi FDInfo
	for len(b) > 0 {
		line := b
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		switch {
		case hasPrefix(line, "prog_id:"):
			if v, ok := parseUint32(trimSpace(line[len("prog_id:"):])); ok {
				fi.ProgID = v
			}
		case hasPrefix(line, "link_id:"):
			if v, ok := parseUint32(trimSpace(line[len("link_id:"):])); ok {
				fi.LinkID = v
			}
		}
	}
	return fi
}

// The helpers below work on []byte without allocating; the /proc walk calls
// them for every BPF fd on the node.

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// parseUint32 parses a non-empty decimal number that fits in 32 bits.
func parseUint32(b []byte) (uint32, bool) {
	v, ok := parseUint64(b)
	if !ok || v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

func parseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
