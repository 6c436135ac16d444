package records

import (
	"bytes"
	"io"
	"testing"
)

// oneByOne hands out its data n bytes per Read, as a seq_file does when
// records do not fill its buffer evenly.
type oneByOne struct {
	b []byte
	n int
}

func (c *oneByOne) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// TestReadSized: records of two sizes, told apart by their first byte,
// come back whole whatever the read() chunking; a cut record at the end
// is an error.
func TestReadSized(t *testing.T) {
	size := func(b []byte) int {
		if b[0]&0x80 != 0 {
			return 3
		}
		return 5
	}
	stream := []byte{0x81, 1, 1, 2, 2, 2, 2, 2, 0x83, 3, 3, 4, 4, 4, 4, 4}
	for _, chunk := range []int{1, 2, 3, 7, 64} {
		var got [][]byte
		err := ReadSized(&oneByOne{b: stream, n: chunk}, make([]byte, 64), 1, size, func(b []byte) {
			got = append(got, bytes.Clone(b))
		})
		if err != nil || len(got) != 4 || !bytes.Equal(bytes.Join(got, nil), stream) || len(got[1]) != 5 {
			t.Errorf("chunks of %d: %v, %d records %v", chunk, err, len(got), got)
		}
	}
	if err := ReadSized(&oneByOne{b: stream[:7], n: 4}, make([]byte, 64), 1, size, func([]byte) {}); err == nil {
		t.Error("a cut record was not an error")
	}
}
