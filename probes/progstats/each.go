package progstats

import "encoding/binary"

// ReadEach runs one pass of the iterator and calls fn with every program's
// record in ascending id order, as Read would return them, decoded each
// into the same Record: fn must copy what it keeps. A one-shot reader
// (`bpfleet list`) builds its programs from the records as they come,
// without a slice of every record: at 1,000 programs ~260 KB (Read's or
// ReadStats' slices) that a fresh process would page-fault in.
func (it *Iter) ReadEach(fn func(*Record)) error {
	var r Record
	return it.pass(func(b []byte) {
		if len(b) == statSize {
			var st Stat
			it.decodeStat(b, &st)
			r = Record{ID: st.ID, CPUs: uint32(binary.LittleEndian.Uint16(b[6:])), StatsKnown: st.StatsKnown,
				RunCount: st.RunCount, RunTimeNs: st.RunTimeNs, MissesKnown: st.MissesKnown, Misses: st.Misses, StatsAddr: st.StatsAddr}
		} else {
			it.decode(b, &r)
		}
		fn(&r)
	})
}
