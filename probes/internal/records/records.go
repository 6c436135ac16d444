// Package records reads the fixed-size records a BPF iterator writes with
// bpf_seq_write, for the iterator loaders in probes/.
package records

import (
	"bytes"
	"fmt"
	"io"
)

// Read reads rd to its end through buf and calls fn with each whole
// record of size bytes. The kernel hands out the seq_file a chunk per
// read(), which need not end on a record boundary, so an unfinished record
// is carried over to the next read. Trailing bytes that make no whole
// record are an error.
func Read(rd io.Reader, buf []byte, size int, fn func([]byte)) error {
	have := 0
	for {
		n, err := rd.Read(buf[have:])
		have += n
		whole := have - have%size
		for off := 0; off < whole; off += size {
			fn(buf[off : off+size])
		}
		have = copy(buf, buf[whole:have])
		if err == io.EOF || (n == 0 && err == nil) {
			break
		}
		if err != nil {
			return err
		}
	}
	if have != 0 {
		return fmt.Errorf("%d trailing bytes are not a whole %d-byte record", have, size)
	}
	return nil
}

// ReadSized is Read for an iterator that writes records of more than one
// size: size is given the first head bytes of a record and returns its
// whole size. A record cut by the end of one read() is carried over as in
// Read.
func ReadSized(rd io.Reader, buf []byte, head int, size func([]byte) int, fn func([]byte)) error {
	have := 0
	for {
		n, err := rd.Read(buf[have:])
		have += n
		off := 0
		for have-off >= head {
			sz := size(buf[off:])
			if have-off < sz {
				break
			}
			fn(buf[off : off+sz])
			off += sz
		}
		have = copy(buf, buf[off:have])
		if err == io.EOF || (n == 0 && err == nil) {
			break
		}
		if err != nil {
			return err
		}
	}
	if have != 0 {
		return fmt.Errorf("%d trailing bytes are not a whole record", have)
	}
	return nil
}

// Strings interns the NUL-padded strings records carry (process names,
// attach function names): a node has few distinct ones, so steady-state
// reads allocate none. Make one with NewStrings.
type Strings struct{ m map[string]string }

func NewStrings() Strings { return Strings{m: map[string]string{}} }

// Get returns b, cut at its first NUL, as a string.
func (s Strings) Get(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return ""
	}
	if v, ok := s.m[string(b)]; ok { // a lookup keyed by string(b) does not allocate
		return v
	}
	if len(s.m) >= 4096 { // bound the cache on pathological nodes
		clear(s.m)
	}
	v := string(b)
	s.m[v] = v
	return v
}
