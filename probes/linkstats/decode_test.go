package linkstats

import (
	"encoding/binary"
	"testing"

	"github.com/bpfleet/bpfleet/probes/internal/records"
)

// record lays out one struct link_record as linkstats.bpf.c writes it.
func record(typ, flags, infoSize uint32, info map[int]uint64, nesting, maxactive uint64) []byte {
	le := binary.LittleEndian
	b := make([]byte, recordSize)
	le.PutUint32(b[0:], 42)
	le.PutUint32(b[4:], typ)
	le.PutUint32(b[8:], 7)
	le.PutUint32(b[12:], flags)
	le.PutUint32(b[16:], infoSize)
	le.PutUint32(b[20:], 2) // BPF_PROG_TYPE_KPROBE
	for off, v := range info {
		if off == 0 || off == 12 {
			le.PutUint32(b[infoOff+off:], uint32(v))
			continue
		}
		le.PutUint64(b[infoOff+off:], v)
	}
	le.PutUint64(b[nestingOff:], nesting)
	le.PutUint64(b[maxactiveOff:], maxactive)
	return b
}

// TestDecodeMissedSplit decodes recorded link records: the missed split is
// read only where the program flagged it, and never where the sum itself
// is absent (a kernel without missed in bpf_link_info).
func TestDecodeMissedSplit(t *testing.T) {
	const (
		whole  = flagWhole | flagKnown
		info67 = 16 + 40 // a bpf_link_info with perf_event.kprobe.missed
		info66 = 16 + 32 // without it
	)
	type want struct {
		missed             uint64
		hasMissed          bool
		nesting, maxactive uint64
		hasSplit           bool
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want want
	}{
		{"kprobe nested", record(linkTypePerfEvent, whole|flagSplit, info67, map[int]uint64{0: perfKprobe, 32: 4}, 4, 0),
			want{4, true, 4, 0, true}},
		{"kretprobe maxactive", record(linkTypePerfEvent, whole|flagSplit, info67, map[int]uint64{0: perfKretprobe, 32: 3}, 0, 3),
			want{3, true, 0, 3, true}},
		{"kretprobe both", record(linkTypePerfEvent, whole|flagSplit, info67, map[int]uint64{0: perfKretprobe, 32: 9}, 5, 4),
			want{9, true, 5, 4, true}},
		{"split absent: zero parts are not zero misses", record(linkTypePerfEvent, whole, info67, map[int]uint64{0: perfKretprobe, 32: 9}, 0, 0),
			want{9, true, 0, 0, false}},
		{"no missed on this kernel", record(linkTypePerfEvent, whole|flagSplit, info66, map[int]uint64{0: perfKprobe}, 1, 0),
			want{0, false, 0, 0, false}},
		{"not known: by syscall", record(linkTypePerfEvent, flagWhole|flagSplit, info67, map[int]uint64{0: perfKprobe, 32: 4}, 4, 0),
			want{0, false, 0, 0, false}},
		{"kprobe_multi entry", record(linkTypeKprobeMulti, whole|flagSplit, 16+24, map[int]uint64{16: 2}, 2, 0),
			want{2, true, 2, 0, true}},
		{"kprobe_multi return: mixed", record(linkTypeKprobeMulti, whole, 16+24, map[int]uint64{12: 1, 16: 2}, 0, 0),
			want{2, true, 0, 0, false}},
		{"tracepoint", record(linkTypePerfEvent, whole, info67, map[int]uint64{0: 5}, 0, 0),
			want{0, false, 0, 0, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := &Iter{names: records.NewStrings()}
			var r Record
			it.decode(tc.b, &r)
			var got want
			got.missed, got.hasMissed = r.Missed()
			got.nesting, got.maxactive, got.hasSplit = r.MissedSplit()
			if got != tc.want {
				t.Errorf("decoded missed %d (%v), split %d nesting + %d maxactive (%v); want %d (%v), %d + %d (%v)",
					got.missed, got.hasMissed, got.nesting, got.maxactive, got.hasSplit,
					tc.want.missed, tc.want.hasMissed, tc.want.nesting, tc.want.maxactive, tc.want.hasSplit)
			}
			if got.hasSplit && got.nesting+got.maxactive != got.missed {
				t.Errorf("split %d + %d does not add up to missed %d", got.nesting, got.maxactive, got.missed)
			}
		})
	}
}
