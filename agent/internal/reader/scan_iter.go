package reader

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/cilium/ebpf"
)

// Scan sources: where a scan reads programs and their counters from.
const (
	// ScanSourceIterator is one read of an iter/bpf_prog program
	// (probes/progstats) that sums each program's per-CPU statistics in
	// the kernel: no per-program syscall, no program fd opened.
	ScanSourceIterator = "iterator"
	// ScanSourceSyscall is GET_NEXT_ID, GET_FD_BY_ID, OBJ_GET_INFO_BY_FD
	// and close per program.
	ScanSourceSyscall = "syscall"
)

// pageSize converts prog->pages to fdinfo's memlock (pages << PAGE_SHIFT).
var pageSize = uint64(os.Getpagesize())

// statsIter is what the reader needs of probes/progstats.
type statsIter interface {
	ReadStats(stats []progstats.Stat, whole []progstats.Record) ([]progstats.Stat, []progstats.Record, error)
	ReadEach(fn func(*progstats.Record)) error
	SetKnownMaxID(id uint32) error
	ProgramID() uint32
	Close() error
}

// loadStatsIter loads the iterator, checks one read of it against the
// kernel's own account of the iterator program, and returns it; on any
// refusal it returns why, in one line, for Scan.FallbackReason.
func (r *Reader) loadStatsIter() (statsIter, string) {
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		return nil, err.Error()
	}
	it, li, err := progstats.LoadCached(cpus, r.cacheDir)
	r.noteCache(li.CacheErr)
	if err != nil {
		return nil, fallbackReason(err, "bpf_prog")
	}
	// The first scan's read is checked (checkRecords) before any of it
	// is used: a separate check read would cost a one-shot list a pass.
	return it, ""
}

// noteCache keeps the first CO-RE cache error of the iterators' loads:
// they share one directory, so one complaint says what is wrong with it.
func (r *Reader) noteCache(err error) {
	if r.cacheErr == nil {
		r.cacheErr = err
	}
}

// checkStatsIter reads the iterator once and holds its record of itself to
// what BPF_OBJ_GET_INFO_BY_FD says: a kernel that loads the program but
// then refuses its reads (a probe read that fails at run time) is caught
// here, before any snapshot, instead of producing zeros.
func checkStatsIter(it statsIter) error {
	if err := it.SetKnownMaxID(0); err != nil {
		return err
	}
	_, recs, err := it.ReadStats(nil, nil)
	if err != nil {
		return fmt.Errorf("first iterator read failed: %w", err)
	}
	return checkRecords(it, recs)
}

// checkError is a first read that failed checkRecords: the reason to fall
// back, as it is.
type checkError struct{ error }

// checkRecords holds a read's whole record of the iterator program itself
// to the kernel's program info (a first read has every record whole).
func checkRecords(it statsIter, recs []progstats.Record) error {
	own := it.ProgramID()
	for i := range recs {
		if recs[i].ID == own {
			return checkOwnRecord(it, &recs[i])
		}
	}
	return fmt.Errorf("the iterator did not list its own program %d", own)
}

// checkOwnRecord holds the iterator program's own whole record r to the
// kernel's program info.
func checkOwnRecord(it statsIter, r *progstats.Record) error {
	if !r.StatsKnown {
		return errors.New("the iterator could not read per-CPU program stats on this kernel")
	}
	if !r.StaticKnown {
		return errors.New("the iterator could not read program map ids or uid on this kernel")
	}
	dir := bpfsys.NewFdinfoDir()
	p, _, err := readProg(it.ProgramID(), nil, time.Time{}, &scratch{mapBuf: make([]uint32, 8), fdinfo: bpfsys.NewFdinfoFiles(&dir)})
	if err != nil {
		return fmt.Errorf("reading the iterator's own program info: %w", err)
	}
	if p.Name != r.Name || p.Tag != hex.EncodeToString(r.Tag[:]) || p.XlatedSize != r.XlatedLen || p.JitedSize != r.JitedLen {
		return fmt.Errorf("the iterator's record of itself (%q %x) disagrees with the kernel's program info (%q %s)", r.Name, r.Tag, p.Name, p.Tag)
	}
	return nil
}

// iterSince is the first Linux release with each iterator target the
// scan uses, for the fallback line.
var iterSince = map[string]string{"bpf_prog": "5.9", "bpf_link": "5.19"}

// fallbackReason says in one line why the iterator over target (bpf_prog,
// bpf_link) is refused, naming the kernel capability when the error shows
// which one is missing.
func fallbackReason(err error, target string) string {
	msg := err.Error()
	why := ""
	switch {
	case strings.Contains(msg, "bpf_map_lookup_percpu_elem"):
		why = "kernel lacks bpf_map_lookup_percpu_elem (Linux 5.19+)"
	case strings.Contains(msg, "bpf_probe_read_kernel") || strings.Contains(msg, "probe_read"):
		why = "kernel refuses bpf_probe_read_kernel"
		if b, _ := os.ReadFile("/sys/kernel/security/lockdown"); strings.Contains(string(b), "[confidentiality]") {
			why += " (lockdown=confidentiality)"
		}
	case strings.Contains(msg, target+" iterator target"):
		why = fmt.Sprintf("kernel has no iter/%s (Linux %s+)", target, iterSince[target])
	case errors.Is(err, ebpf.ErrNotSupported):
		why = "kernel refuses the " + target + " iterator"
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	if why != "" {
		return why + ": " + msg
	}
	return msg
}

// fallBack leaves the iterator for the syscall path for good.
func (r *Reader) fallBack(reason string) {
	if r.iter != nil {
		r.iter.Close()
		r.iter = nil
	}
	r.steady.disable("programs are read by syscall")
	r.fallback = reason
}

// Source reports the scan source and, on the syscall path, why.
func (r *Reader) Source() (string, string) {
	if r.iter != nil {
		return ScanSourceIterator, ""
	}
	return ScanSourceSyscall, r.fallback
}

// pass runs one iterator read with whole records only for ids above known,
// and checks the first read ever against the kernel's own info
// (checkRecords) before any of it is used.
func (r *Reader) pass(known uint32) ([]progstats.Stat, []progstats.Record, error) {
	if err := r.iter.SetKnownMaxID(known); err != nil {
		return nil, nil, err
	}
	stats, whole, err := r.iter.ReadStats(r.stats, r.whole)
	r.stats, r.whole = stats, whole
	if err != nil {
		return nil, nil, err
	}
	if !r.iterChecked {
		if err := checkRecords(r.iter, whole); err != nil {
			return nil, nil, checkError{err}
		}
		r.iterChecked = true
	}
	return stats, whole, nil
}

// readIter reads every program from one pass of the iterator. A program
// seen for the first time whose record is incomplete (more maps than a
// record holds), or whose per-CPU sum could not be read, is read by
// syscall instead; one that is gone by then was unloaded after the pass and
// counts as vanished. r.order becomes the programs' statics in the order
// of the returned slice (ascending id), for join and the next read.
//
// The steady state is a merge: the pass and the previous order are both in
// ascending id order, so a known program's static part is found without a
// map lookup, and only its counters are decoded and set.
func (r *Reader) readIter(bootWall time.Time, st *ScanStats) ([]Program, error) {
	// Without a load or unload since the last read, the statistics come
	// from the stats table without a walk (scan_steady.go); a one-shot
	// reader scans once and never loads it.
	var stats []progstats.Stat
	var whole []progstats.Record
	steady := false
	if !r.oneShot {
		stats, steady = r.steadyRead(st)
	}
	if !steady {
		// Programs up to the highest id read whole last time need only
		// their counters: the iterator skips their static fields.
		var err error
		if stats, whole, err = r.pass(r.knownMax); err != nil {
			return nil, err
		}
	}
	st.Walk = !steady
	// Sized for every program at the first read: grown from empty, the
	// slice and the cache cost a one-shot list ~200 page faults and their
	// copies. Only then: later reads reuse last read's slots in place.
	if r.order == nil {
		if cap(r.progBuf) < len(stats) {
			r.progBuf = make([]Program, 0, len(stats))
		}
		if len(r.progs) == 0 {
			r.progs = make(map[uint32]*progStatic, len(stats))
		}
	}
	// The slice is reused from scan to scan: Agent.Scan copies every
	// program into its snapshot and keeps none of progs.
	progs := r.progBuf[:0]
	defer func() { r.progBuf = progs[:0] }()
	prev, order := r.order, r.orderBuf[:0]
	addrs := r.steady.next[:0]
	j := 0
	opened := false
	var maxID uint32
	inPlace := len(stats) == len(prev) // every program in last read's slot
	// One allocation for every program's misses counter: a pointer into
	// the cache would change under snapshots already handed out.
	misses := make([]uint64, len(stats))
	for i := range stats {
		rec := &stats[i]
		for j < len(prev) && prev[j].prog.ID < rec.ID {
			j++
		}
		var s *progStatic
		if j < len(prev) && prev[j].prog.ID == rec.ID {
			s = prev[j]
		} else {
			s = r.progs[rec.ID] // read by syscall before, or new
		}
		fresh := s == nil
		var full *progstats.Record
		if rec.Whole >= 0 {
			full = &whole[rec.Whole]
			if fresh && full.StaticKnown {
				s = staticFromRecord(full, bootWall)
			}
		}
		if s == nil || !rec.StatsKnown {
			if !opened {
				_ = r.fdinfo.Open() // unreadable: memory is absent, the rest read
				defer r.scratch.fdinfo.Release()
				opened = true
			}
			p, ns, err := readProg(rec.ID, s, bootWall, &r.scratch)
			if !r.keep(st, err) {
				continue
			}
			s = ns
			progs = append(progs, p)
			inPlace = false
		} else {
			var p *Program
			if k := len(progs); k < len(prev) && k < cap(progs) && prev[k] == s {
				// The slot held this same program last scan: its
				// static fields are s.prog's already, its counters
				// are set here, and its joins are reset by finish
				// unless they stand as they are (reader.joinsKept).
				// (Below len(prev) the buffer never grew this scan,
				// so the slot is last scan's.)
				progs = progs[:k+1]
				p = &progs[k]
				p.RecursionMisses = nil // counters are set below
			} else {
				progs = append(progs, s.prog)
				p = &progs[k]
				inPlace = false
			}
			p.RunCount, p.RunTimeNs = rec.RunCount, rec.RunTimeNs
			if rec.MissesKnown {
				misses[i] = rec.Misses
				p.RecursionMisses = &misses[i]
			}
		}
		if fresh {
			r.progs[rec.ID] = s
		}
		s.seen = r.seq
		if full != nil {
			s.facts, s.haveFacts = factsFromRecord(full), true
		}
		order = append(order, s)
		addrs = append(addrs, rec.StatsAddr)
		if s.statsAddr == 0 {
			s.statsAddr = rec.StatsAddr // fixed for the program's life
		}
		maxID = max(maxID, rec.ID)
	}
	r.steady.next = r.steady.keepAddrs(addrs, !steady)
	// Double-buffered: prev is the last read's order, kept for the one
	// after this (never handed out).
	r.order, r.orderBuf = order, prev[:0]
	r.knownMax = maxID
	r.inPlace = inPlace && len(progs) == len(prev)
	return progs, nil
}

// readIterOnce is readIter for the scan of a one-shot agent (`bpfleet
// list`), which keeps nothing for a next scan: each program is built once,
// straight from its record as the pass hands it out (no slice of every
// record), into the slice the snapshot will hand out (Agent.Scan copies
// none); the values it points to come from a slab, and its meta goes
// beside it (r.metas) instead of into a cached progStatic. At 1,000
// programs that is ~1 MB and ~250 fresh pages (a page fault each) less
// than readIter's first read and the snapshot's copy (BenchmarkOneShotPin).
// A later scan of the same agent, if any, is readIter's first read.
func (r *Reader) readIterOnce(bootWall time.Time, st *ScanStats) ([]ProgramStat, error) {
	if err := r.iter.SetKnownMaxID(0); err != nil {
		return nil, err
	}
	// Sized for a node with many programs, as the count is not known
	// before the pass: in a fresh process capacity never written is never
	// faulted in, while growing from small would copy and fault in about
	// twice the programs (in a process that reuses its heap the capacity
	// is zeroed: BenchmarkOneShotPin). More programs double it (grow).
	progs := make([]ProgramStat, 0, oneShotCap)
	metas := make([]progMeta, 0, oneShotCap)
	grow := func() {
		if len(progs) == cap(progs) {
			progs, metas = slices.Grow(progs, len(progs)), slices.Grow(metas, len(metas))
		}
	}
	var slab valueSlab
	opened := false
	own, check := r.iter.ProgramID(), !r.iterChecked
	var checkErr error
	err := r.iter.ReadEach(func(full *progstats.Record) {
		if checkErr != nil {
			return
		}
		if check && full.ID == own {
			// The first read is checked before any of it is used.
			if checkErr = checkOwnRecord(r.iter, full); checkErr != nil {
				return
			}
			check = false
		}
		if !full.Whole || !full.StaticKnown || !full.StatsKnown {
			// As in readIter: what the record lacks is read by syscall.
			if !opened {
				_ = r.fdinfo.Open() // unreadable: memory is absent, the rest read
				opened = true
			}
			p, s, err := readProg(full.ID, nil, bootWall, &r.scratch)
			if !r.keep(st, err) {
				return
			}
			m := s.progMeta
			if full.Whole {
				m.facts, m.haveFacts = factsFromRecord(full), true
			}
			grow()
			progs, metas = append(progs, ProgramStat{Program: p}), append(metas, m)
			return
		}
		grow()
		progs = append(progs, ProgramStat{})
		p := &progs[len(progs)-1].Program
		programFromRecord(p, full, bootWall, &slab)
		p.RunCount, p.RunTimeNs = full.RunCount, full.RunTimeNs
		if full.MissesKnown {
			m := slab.u64()
			*m = full.Misses
			p.RecursionMisses = m
		}
		metas = append(metas, metaFromRecord(full))
	})
	if opened {
		r.scratch.fdinfo.Release()
	}
	switch {
	case checkErr != nil:
		return nil, checkError{checkErr}
	case err != nil:
		return nil, err
	case check:
		return nil, checkError{fmt.Errorf("the iterator did not list its own program %d", own)}
	}
	r.iterChecked = true
	r.metas = metas
	r.order, r.knownMax = nil, 0
	return progs, nil
}

// oneShotCap is how many programs readIterOnce makes room for before the
// pass. A variable for tests.
var oneShotCap = 2048

// resetDynamic sets every field of p that a scan sets (counters, joins,
// owners, miss kind) to s's, the program's static part: p, whose static
// fields are s's already, then equals s. A field added to Program is
// dynamic unless TestResetDynamic lists it as static.
func resetDynamic(p, s *Program) {
	p.RunCount, p.RunTimeNs, p.RecursionMisses = s.RunCount, s.RunTimeNs, s.RecursionMisses
	resetJoins(p, s)
}

// resetJoins sets what join, the owners and the miss kind set in p to s's.
func resetJoins(p, s *Program) {
	p.AttachType, p.AttachTarget, p.TargetClass, p.Sleepable, p.MissKind = s.AttachType, s.AttachTarget, s.TargetClass, s.Sleepable, s.MissKind
	p.Links, p.Owners, p.Pins = s.Links, s.Owners, s.Pins
}

// staticFromRecord is newProgStatic from an iterator record: the same
// fields from the same kernel structs bpf_prog_get_info_by_fd() reads.
func staticFromRecord(rec *progstats.Record, bootWall time.Time) *progStatic {
	s := &progStatic{progMeta: metaFromRecord(rec)}
	programFromRecord(&s.prog, rec, bootWall, nil)
	return s
}

// programFromRecord sets p to the program's static part from its whole
// record, its values allocated from slab (nil: one each).
func programFromRecord(p *Program, rec *progstats.Record, bootWall time.Time, slab *valueSlab) {
	uid := slab.u32(1)
	uid[0] = rec.UID
	memlock := slab.u64()
	*memlock = uint64(rec.Pages) * pageSize
	mapIDs := slab.u32(min(int(rec.NrMapIDs), progstats.MaxMapIDs))
	copy(mapIDs, rec.MapIDs[:])
	*p = Program{
		ID:         rec.ID,
		Name:       rec.Name,
		Tag:        slab.tag(&rec.Tag),
		Type:       ProgTypeName(rec.Type),
		LoadTime:   bootWall.Add(time.Duration(rec.LoadTime)),
		BTFID:      rec.BTFID,
		JitedSize:  rec.JitedLen,
		XlatedSize: rec.XlatedLen,
		AttachType: Unattached,
		UID:        &uid[0],
		MapIDs:     mapIDs,
		Memlock:    memlock,
	}
	if rec.VerifiedInsnsKnown {
		v := slab.u32(1)
		v[0] = rec.VerifiedInsns
		p.VerifiedInsns = &v[0]
	}
}

// metaFromRecord is a program's meta from its whole record, facts included.
func metaFromRecord(rec *progstats.Record) progMeta {
	return progMeta{
		attachBTFObjID: rec.AttachBTFObjID,
		attachBTFID:    rec.AttachBTFID,
		progTypeID:     rec.Type,
		facts:          factsFromRecord(rec),
		haveFacts:      true,
	}
}

func factsFromRecord(rec *progstats.Record) ProgFacts {
	return ProgFacts{ExpectedAttachType: rec.ExpectedAttachType, Sleepable: rec.Sleepable, SleepableKnown: rec.SleepableKnown, AttachFunc: rec.AttachFunc}
}

// valueSlab holds, in a few allocations, the values of every program of
// a one-shot read that Program points to: per program a uid, memlock,
// recursion misses, verified instructions, map ids and tag would otherwise
// be six small allocations. A value in a slab keeps its chunk alive, so
// only one-shot reads use one (a long-running agent frees programs one by
// one). Its zero value is ready; a nil slab allocates each value on its
// own.
type valueSlab struct {
	u32s []uint32
	u64s []uint64
	tags []byte
}

// Values per chunk of a slab: a chunk holds those of 2,000 or more
// programs (one without maps takes two uint32s, two uint64s and 16 tag
// bytes). A variable for tests.
var slabChunk = 4096

// u32 returns n values, never nil (an empty map id list is [] in JSON, not
// null), capped so that an append cannot reach the next program's.
func (sl *valueSlab) u32(n int) []uint32 {
	if sl == nil {
		return make([]uint32, n)
	}
	if cap(sl.u32s)-len(sl.u32s) < n {
		sl.u32s = make([]uint32, 0, max(n, slabChunk))
	}
	k := len(sl.u32s)
	sl.u32s = sl.u32s[:k+n]
	return sl.u32s[k : k+n : k+n]
}

func (sl *valueSlab) u64() *uint64 {
	if sl == nil {
		return new(uint64)
	}
	if len(sl.u64s) == cap(sl.u64s) {
		sl.u64s = make([]uint64, 0, slabChunk)
	}
	sl.u64s = sl.u64s[:len(sl.u64s)+1]
	return &sl.u64s[len(sl.u64s)-1]
}

// tag is hex.EncodeToString(tag[:]); from a slab, a string over its bytes,
// which are never written again.
func (sl *valueSlab) tag(tag *[8]byte) string {
	if sl == nil {
		return hex.EncodeToString(tag[:])
	}
	if cap(sl.tags)-len(sl.tags) < 2*len(tag) {
		sl.tags = make([]byte, 0, 4*slabChunk)
	}
	k := len(sl.tags)
	sl.tags = hex.AppendEncode(sl.tags, tag[:])
	return unsafe.String(&sl.tags[k], 2*len(tag))
}
