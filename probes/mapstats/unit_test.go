package mapstats

import (
	"encoding/binary"
	"testing"

	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/cilium/ebpf"
)

// TestDecode: a map_record as mapstats.bpf.c lays it out.
func TestDecode(t *testing.T) {
	rec := func(id, typ, key, val, max, mflags, flags uint32, count int64, name string) []byte {
		b := make([]byte, recordSize)
		le := binary.LittleEndian
		for i, v := range []uint32{id, typ, key, val, max, mflags, flags} {
			le.PutUint32(b[4*i:], v)
		}
		le.PutUint64(b[32:], uint64(count))
		copy(b[40:56], name)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want Record
	}{
		{"hash with count", rec(7, 1, 4, 8, 64, 1, flagCount, 37, "conns"),
			Record{ID: 7, Whole: true, Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 64, Flags: 1, Name: "conns", CountKnown: true, Count: 37}},
		{"no kfunc", rec(8, 9, 4, 8, 64, 0, 0, 0, "lru"),
			Record{ID: 8, Whole: true, Type: ebpf.LRUHash, KeySize: 4, ValueSize: 8, MaxEntries: 64, Name: "lru"}},
		{"name of 16 bytes, no NUL", rec(9, 2, 4, 4, 1, 0, 0, 0, "0123456789abcdef"),
			Record{ID: 9, Whole: true, Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1, Name: "0123456789abcdef"}},
		{"unknown flag bits ignored", rec(10, 27, 0, 0, 4096, 0, 0xfe, 0, ""),
			Record{ID: 10, Whole: true, Type: ebpf.RingBuf, MaxEntries: 4096}},
		{"count record", countRec(11, flagCompact|flagCount, 12),
			Record{ID: 11, CountKnown: true, Count: 12}},
		{"count record, no kfunc", countRec(12, flagCompact, 0),
			Record{ID: 12}},
	} {
		if n := recordLen(tc.b); n != len(tc.b) {
			t.Errorf("%s: recordLen %d for a %d-byte record", tc.name, n, len(tc.b))
		}
		var got Record
		decode(tc.b, &got, records.NewStrings())
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func countRec(id, flags uint32, count int64) []byte {
	b := make([]byte, countSize)
	binary.LittleEndian.PutUint32(b[0:], id)
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint64(b[8:], uint64(count))
	return b
}

// TestMemoryRuleTable: which maps have their memory read again, and when.
func TestMemoryRuleTable(t *testing.T) {
	for _, tc := range []struct {
		typ   ebpf.MapType
		flags uint32
		want  memRule
	}{
		{ebpf.Hash, 0, memFixed},
		{ebpf.Hash, bpfFNoPrealloc, memByCount},
		{ebpf.PerCPUHash, bpfFNoPrealloc, memByCount},
		{ebpf.HashOfMaps, bpfFNoPrealloc, memByCount},
		{ebpf.LRUHash, 0, memFixed},
		{ebpf.LRUCPUHash, 0, memFixed},
		{ebpf.Array, 0, memFixed},
		{ebpf.RingBuf, 0, memFixed},
		{ebpf.PerfEventArray, 0, memFixed},
		{ebpf.ArrayOfMaps, 0, memFixed},
		{ebpf.LPMTrie, bpfFNoPrealloc, memAlways},
		{ebpf.DevMapHash, 0, memAlways},
		{ebpf.SockHash, 0, memAlways},
		{ebpf.MapType(4000), 0, memAlways}, // a type newer than the rule
	} {
		if got := memoryRule(tc.typ, tc.flags); got != tc.want {
			t.Errorf("memoryRule(%v, %#x) = %d, want %d", tc.typ, tc.flags, got, tc.want)
		}
	}
	for _, tc := range []struct {
		rule       memRule
		countKnown bool
		was, now   int64
		want       bool
	}{
		{memFixed, true, 1, 2, false},
		{memFixed, false, 0, 0, false},
		{memByCount, true, 5, 5, false},
		{memByCount, true, 5, 6, true},
		{memByCount, false, 0, 0, true},
		{memAlways, true, 5, 5, true},
	} {
		if got := needRefresh(tc.rule, tc.countKnown, tc.was, tc.now); got != tc.want {
			t.Errorf("needRefresh(%d, %v, %d, %d) = %v, want %v", tc.rule, tc.countKnown, tc.was, tc.now, got, tc.want)
		}
	}
}

// TestFullness: entries over max entries, only when both are there.
func TestFullness(t *testing.T) {
	for _, tc := range []struct {
		m    Map
		want float64
		ok   bool
	}{
		{Map{MaxEntries: 64, Entries: Entries{Count: 16, Known: true}}, 0.25, true},
		{Map{MaxEntries: 64, Entries: Entries{Count: 64, Known: true}}, 1, true},
		{Map{MaxEntries: 64, Entries: Entries{Count: 5, Reason: "at least 5"}}, 0, false},
		{Map{MaxEntries: 0, Entries: Entries{Known: true}}, 0, false},
	} {
		if got, ok := tc.m.Fullness(); got != tc.want || ok != tc.ok {
			t.Errorf("Fullness(%+v) = %v, %v; want %v, %v", tc.m, got, ok, tc.want, tc.ok)
		}
	}
}
