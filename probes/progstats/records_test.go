package progstats

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// chunked hands out its data at most n bytes per Read, as a seq_file
// does when records do not fill its buffer evenly.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// statRec and wholeRec build the two record kinds as progstats.bpf.c
// writes them.
func statRec(id uint32, flags, cpus uint16, cnt, nsecs, misses uint64) []byte {
	b := make([]byte, statSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], id)
	le.PutUint16(b[4:], flags|flagCompact)
	le.PutUint16(b[6:], cpus)
	le.PutUint64(b[8:], cnt)
	le.PutUint64(b[16:], nsecs)
	le.PutUint64(b[24:], misses)
	le.PutUint64(b[32:], addrOf(id))
	return b
}

// addrOf is the stats address the test records give program id.
func addrOf(id uint32) uint64 { return 0xffff_a000_0000_0000 + uint64(id)<<6 }

func wholeRec(id, typ uint32, name string, cnt uint64, cpus uint32) []byte {
	b := make([]byte, recordSize)
	le := binary.LittleEndian
	le.PutUint32(b[0:], id)
	le.PutUint32(b[4:], typ)
	le.PutUint32(b[24:], flagStats|flagStatic)
	copy(b[40:56], name)
	le.PutUint64(b[64:], cnt)
	le.PutUint32(b[240:], cpus)
	le.PutUint64(b[statsAddrOff:], addrOf(id))
	return b
}

// TestReadRecords decodes streams of both record kinds, cut at every
// chunk size, through Read's and ReadStats' decoders.
func TestReadRecords(t *testing.T) {
	const cpus = 4
	type want struct {
		id         uint32
		whole      bool
		statsKnown bool
		missesKnow bool
		cnt, ns, m uint64
		name       string
	}
	cases := []struct {
		name string
		recs [][]byte
		want []want
		err  bool
	}{
		{name: "empty"},
		{
			name: "stats only",
			recs: [][]byte{statRec(3, flagStats|flagMisses, cpus, 10, 200, 1), statRec(7, flagStats, cpus, 0, 0, 0)},
			want: []want{{id: 3, statsKnown: true, missesKnow: true, cnt: 10, ns: 200, m: 1}, {id: 7, statsKnown: true}},
		},
		{
			name: "known then new",
			recs: [][]byte{statRec(3, flagStats|flagMisses, cpus, 5, 6, 7), wholeRec(9, 26, "fresh", 42, cpus), statRec(11, flagStats, cpus, 1, 2, 0)},
			want: []want{{id: 3, statsKnown: true, missesKnow: true, cnt: 5, ns: 6, m: 7}, {id: 9, whole: true, statsKnown: true, cnt: 42, name: "fresh"}, {id: 11, statsKnown: true, cnt: 1, ns: 2}},
		},
		{
			// A sum over fewer CPUs than Load was given is not known.
			name: "short cpu sums",
			recs: [][]byte{statRec(3, flagStats, cpus-1, 5, 6, 0), wholeRec(9, 1, "x", 1, cpus-1)},
			want: []want{{id: 3, cnt: 5, ns: 6}, {id: 9, whole: true, cnt: 1, name: "x"}},
		},
		{
			name: "no stats",
			recs: [][]byte{statRec(3, 0, 0, 0, 0, 0)},
			want: []want{{id: 3}},
		},
		{name: "trailing bytes", recs: [][]byte{statRec(3, flagStats, cpus, 1, 1, 0), {1, 2, 3}}, err: true},
		{name: "cut stat record", recs: [][]byte{statRec(3, flagStats, cpus, 1, 1, 0)[:20]}, err: true},
		{name: "cut whole record", recs: [][]byte{wholeRec(3, 1, "x", 1, cpus)[:100]}, err: true},
	}
	for _, c := range cases {
		data := bytes.Join(c.recs, nil)
		for _, chunk := range []int{1, 3, 7, statSize, statSize + 5, recordSize, 1 << 20} {
			it := &Iter{buf: make([]byte, bufSize), names: newNames(), cpus: cpus}
			stats, whole, err := it.readStats(&chunked{data, chunk}, nil, nil)
			if c.err {
				if err == nil {
					t.Errorf("%s, chunks of %d: no error", c.name, chunk)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, chunks of %d: %v", c.name, chunk, err)
				continue
			}
			if len(stats) != len(c.want) {
				t.Errorf("%s, chunks of %d: %d records, want %d", c.name, chunk, len(stats), len(c.want))
				continue
			}
			for i, w := range c.want {
				st := stats[i]
				got := want{id: st.ID, whole: st.Whole >= 0, statsKnown: st.StatsKnown, missesKnow: st.MissesKnown, cnt: st.RunCount, ns: st.RunTimeNs, m: st.Misses}
				if st.Whole >= 0 {
					got.name = whole[st.Whole].Name
				}
				if st.StatsAddr != addrOf(st.ID) {
					t.Errorf("%s, chunks of %d, record %d: stats address %#x, want %#x", c.name, chunk, i, st.StatsAddr, addrOf(st.ID))
				}
				if got != w {
					t.Errorf("%s, chunks of %d, record %d: got %+v, want %+v", c.name, chunk, i, got, w)
				}
			}
		}
	}
}
