// Package progstats reads, in one pass of a BPF iterator over every program
// in the kernel, what `bpfleet list` shows about each program: identity,
// load time, sizes, map ids, the iterator-only facts (expected attach type,
// sleepable, attach function) and the run-time statistics (run count, run
// time, recursion misses) summed over every possible CPU as
// bpf_prog_get_stats() sums them. No program fd is opened.
package progstats

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// MaxMapIDs is how many map ids a record carries; a program with more is
// marked incomplete (StaticKnown false) and its caller reads it by syscall.
const MaxMapIDs = 16

// Record is what the iterator reports about one BPF program.
type Record struct {
	ID uint32
	// Whole is false for a program up to SetKnownMaxID's id: the record
	// then has only ID and the statistics (and CPUs).
	Whole              bool
	Type               uint32 // enum bpf_prog_type
	ExpectedAttachType uint32 // enum bpf_attach_type, as given at load
	AttachBTFID        uint32
	AttachBTFObjID     uint32
	DstProgID          uint32
	Sleepable          bool
	SleepableKnown     bool
	AttachFunc         string

	Tag      [8]byte
	Name     string
	LoadTime uint64 // ns since boot, as bpf_prog_info.load_time

	// StatsKnown says RunCount and RunTimeNs are sums over every possible
	// CPU; false when a per-CPU read failed (then they are not reported).
	StatsKnown  bool
	RunCount    uint64
	RunTimeNs   uint64
	MissesKnown bool // the kernel has bpf_prog_stats.misses (5.12+)
	Misses      uint64
	CPUs        uint32 // how many CPUs were summed
	// StatsAddr is prog->stats, the program's raw __percpu statistics
	// address (0 when the iterator could not read it): probes/statstable
	// sums the statistics from it without a walk over every program.
	StatsAddr uint64

	// StaticKnown says UID, map ids and JitedLen were all read (a program
	// with more than MaxMapIDs maps or many subprograms is not).
	StaticKnown        bool
	UID                uint32
	NrMapIDs           uint32
	MapIDs             [MaxMapIDs]uint32
	JitedLen           uint32
	XlatedLen          uint32
	BTFID              uint32
	VerifiedInsnsKnown bool
	VerifiedInsns      uint32
	Pages              uint32 // prog->pages: fdinfo's memlock is Pages * page size
}

// Layout of struct prog_record in progstats.bpf.c.
const (
	recordSize    = 256
	statsAddrOff  = 248
	attachFuncOff = 176
	attachFuncLen = 64
)

// Layout of struct stat_record, the steady-state record of a program up to
// SetKnownMaxID's id: id, flags (u16), cpus (u16), run count, run time,
// misses, prog->stats.
const (
	statSize = 40
	// kindOff is where a stat_record has its flags and a prog_record the
	// low half of its program type: flagCompact there says stat_record.
	kindOff = 4
)

// Bits of prog_record.flags.
const (
	flagSleepable      = 1 << 0
	flagSleepableKnown = 1 << 1
	flagStats          = 1 << 5
	flagMisses         = 1 << 6
	flagStatic         = 1 << 7
	flagVerifiedInsns  = 1 << 8
	flagCompact        = 1 << 15
)

const bufSize = 64 << 10

var pageSize = os.Getpagesize()

// Iter is a loaded and attached iterator. It is not safe for concurrent use.
type Iter struct {
	prog   *ebpf.Program
	maps   map[string]*ebpf.Map
	known  coreload.KnownMaxID
	link   *link.Iter
	progID uint32
	cpus   int
	buf    []byte
	names  records.Strings
}

// Load loads the iterator program and attaches it, summing statistics over
// cpus possible CPUs (PossibleCPUs), without the CO-RE cache (the agent
// passes the directory internal/config chose to LoadCached). When the
// kernel refuses it the error wraps ebpf.ErrNotSupported and says why.
func Load(cpus int) (*Iter, error) {
	it, _, err := LoadCached(cpus, "")
	return it, err
}

func newNames() records.Strings { return records.NewStrings() }

// SetKnownMaxID tells the iterator that the caller holds the static
// fields (StaticKnown's and the facts) of every program up to id: later
// reads give only ID and the statistics for those (StaticKnown false), and
// the whole record for newer ids. Program ids only grow (until they wrap
// after 2^31 loads), so a program up to id that the caller does not hold
// was unreadable or gone in its last read; the caller reads it by syscall.
// 0 asks for whole records.
func (it *Iter) SetKnownMaxID(id uint32) error { return it.known.Set(id) }

// ProgramID is the id of the iterator program itself.
func (it *Iter) ProgramID() uint32 { return it.progID }

// Read runs one pass of the iterator and returns dst[:0] with one Record
// per program in the kernel appended, in ascending id order (the kernel
// walks its program idr in order).
func (it *Iter) Read(dst []Record) ([]Record, error) {
	dst = dst[:0]
	err := it.pass(func(b []byte) {
		dst = append(dst, Record{})
		r := &dst[len(dst)-1]
		if len(b) == statSize {
			var st Stat
			it.decodeStat(b, &st)
			r.ID, r.CPUs = st.ID, uint32(binary.LittleEndian.Uint16(b[6:]))
			r.StatsKnown, r.RunCount, r.RunTimeNs = st.StatsKnown, st.RunCount, st.RunTimeNs
			r.MissesKnown, r.Misses = st.MissesKnown, st.Misses
			r.StatsAddr = st.StatsAddr
			return
		}
		it.decode(b, r)
	})
	if err != nil {
		return dst[:0], err
	}
	return dst, nil
}

// Stat is one program's statistics from ReadStats.
type Stat struct {
	ID uint32
	// Whole is the index, in the records ReadStats returns, of this
	// program's whole record; -1 when the pass gave only its statistics
	// (an id up to SetKnownMaxID's).
	Whole int32
	// StatsKnown and MissesKnown as in Record (a sum over fewer CPUs than
	// Load was given is not known).
	StatsKnown  bool
	MissesKnown bool
	RunCount    uint64
	RunTimeNs   uint64
	Misses      uint64
	// StatsAddr is Record.StatsAddr.
	StatsAddr uint64
}

// ReadStats runs one pass of the iterator and returns stats[:0] with every
// program's statistics appended in ascending id order, and whole[:0] with
// the whole records of the programs that had one (ids above
// SetKnownMaxID's), each named by its Stat's Whole. The steady-state read:
// nothing but the counters is decoded for programs the caller holds.
func (it *Iter) ReadStats(stats []Stat, whole []Record) ([]Stat, []Record, error) {
	rd, err := it.link.Open()
	if err != nil {
		return stats[:0], whole[:0], fmt.Errorf("opening bpf_prog iterator: %w", err)
	}
	defer rd.Close()
	return it.readStats(rd, stats, whole)
}

// readStats is ReadStats from rd.
func (it *Iter) readStats(rd io.Reader, stats []Stat, whole []Record) ([]Stat, []Record, error) {
	stats, whole = stats[:0], whole[:0]
	err := readRecords(rd, it.buf, func(b []byte) {
		stats = append(stats, Stat{})
		st := &stats[len(stats)-1]
		if len(b) == statSize {
			it.decodeStat(b, st)
			return
		}
		whole = append(whole, Record{})
		r := &whole[len(whole)-1]
		it.decode(b, r)
		*st = Stat{ID: r.ID, Whole: int32(len(whole) - 1), StatsKnown: r.StatsKnown, MissesKnown: r.MissesKnown,
			RunCount: r.RunCount, RunTimeNs: r.RunTimeNs, Misses: r.Misses, StatsAddr: r.StatsAddr}
	})
	if err != nil {
		return stats[:0], whole[:0], fmt.Errorf("reading bpf_prog iterator: %w", err)
	}
	return stats, whole, nil
}

// pass reads the iterator once and calls fn with each record, whole or
// stat-only (told apart by its length).
func (it *Iter) pass(fn func([]byte)) error {
	rd, err := it.link.Open()
	if err != nil {
		return fmt.Errorf("opening bpf_prog iterator: %w", err)
	}
	defer rd.Close()
	if err := readRecords(rd, it.buf, fn); err != nil {
		return fmt.Errorf("reading bpf_prog iterator: %w", err)
	}
	return nil
}

// readRecords reads rd to its end through buf and calls fn with each
// record: a stat_record (statSize bytes) where the flags at kindOff have
// flagCompact, else a prog_record (recordSize), as records.ReadSized.
func readRecords(rd io.Reader, buf []byte, fn func([]byte)) error {
	return records.ReadSized(rd, buf, kindOff+2, recordLen, fn)
}

// recordLen is the size of the record b starts.
func recordLen(b []byte) int {
	if binary.LittleEndian.Uint16(b[kindOff:])&flagCompact != 0 {
		return statSize
	}
	return recordSize
}

// decodeStat decodes a stat_record.
func (it *Iter) decodeStat(b []byte, st *Stat) {
	le := binary.LittleEndian
	flags := le.Uint16(b[4:])
	*st = Stat{
		ID:          le.Uint32(b[0:]),
		Whole:       -1,
		StatsKnown:  flags&flagStats != 0 && int(le.Uint16(b[6:])) == it.cpus,
		MissesKnown: flags&flagMisses != 0,
		RunCount:    le.Uint64(b[8:]),
		RunTimeNs:   le.Uint64(b[16:]),
		Misses:      le.Uint64(b[24:]),
		StatsAddr:   le.Uint64(b[32:]),
	}
}

func (it *Iter) decode(b []byte, r *Record) {
	le := binary.LittleEndian // both targets (amd64, arm64) are little-endian
	flags := le.Uint32(b[24:])
	*r = Record{
		ID:                 le.Uint32(b[0:]),
		Type:               le.Uint32(b[4:]),
		ExpectedAttachType: le.Uint32(b[8:]),
		AttachBTFID:        le.Uint32(b[12:]),
		AttachBTFObjID:     le.Uint32(b[16:]),
		DstProgID:          le.Uint32(b[20:]),
		Sleepable:          flags&flagSleepable != 0,
		SleepableKnown:     flags&flagSleepableKnown != 0,
		NrMapIDs:           le.Uint32(b[28:]),
		LoadTime:           le.Uint64(b[56:]),
		StatsKnown:         flags&flagStats != 0,
		RunCount:           le.Uint64(b[64:]),
		RunTimeNs:          le.Uint64(b[72:]),
		MissesKnown:        flags&flagMisses != 0,
		Misses:             le.Uint64(b[80:]),
		JitedLen:           le.Uint32(b[88:]),
		XlatedLen:          le.Uint32(b[92:]),
		UID:                le.Uint32(b[96:]),
		BTFID:              le.Uint32(b[100:]),
		VerifiedInsns:      le.Uint32(b[104:]),
		VerifiedInsnsKnown: flags&flagVerifiedInsns != 0,
		Pages:              le.Uint32(b[108:]),
		StaticKnown:        flags&flagStatic != 0,
		CPUs:               le.Uint32(b[240:]),
		StatsAddr:          le.Uint64(b[statsAddrOff:]),
		Whole:              true,
	}
	// A record summed over fewer CPUs than asked (the kernel's nr_cpu_ids
	// is smaller than the possible mask said) is not a whole sum.
	if int(r.CPUs) != it.cpus {
		r.StatsKnown = false
	}
	copy(r.Tag[:], b[32:40])
	r.Name = it.names.Get(b[40:56])
	for i := range min(int(r.NrMapIDs), MaxMapIDs) {
		r.MapIDs[i] = le.Uint32(b[112+4*i:])
	}
	r.AttachFunc = it.names.Get(b[attachFuncOff : attachFuncOff+attachFuncLen])
}

// Close detaches and unloads the iterator.
func (it *Iter) Close() error {
	return coreload.Close(it.link, it.prog, it.maps)
}
