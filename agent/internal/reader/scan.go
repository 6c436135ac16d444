package reader

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"golang.org/x/sys/unix"
)

// ProgFacts are what a bpf_prog iterator tells about a program beyond
// bpf_prog_info, which has no expected attach type and no sleepable flag.
type ProgFacts struct {
	ExpectedAttachType uint32
	Sleepable          bool
	SleepableKnown     bool
	AttachFunc         string
}

// FactsSource reads ProgFacts for every program in one go (a BPF iterator).
type FactsSource interface {
	ReadFacts(dst map[uint32]ProgFacts) error
	Close() error
}

// progStatic is what never changes for a program id: read once, reused by
// every later scan until the program is gone.
type progStatic struct {
	prog Program // counters and joins left zero
	progMeta
}

// progMeta is what join needs of a program beside its Program.
type progMeta struct {
	attachBTFObjID uint32
	attachBTFID    uint32
	progTypeID     uint32
	seen           uint64
	// facts are the iterator's, kept from the program's whole record
	// (the iterator source reads them once per id).
	facts     ProgFacts
	haveFacts bool
	// statsAddr is prog->stats (the iterator's; 0 on the syscall path):
	// where the miss watcher finds the program's per-CPU miss counters.
	statsAddr uint64
}

// linkStatic is the immutable part of a link; dynamic says whether the link
// has a counter (kprobe missed) that must be re-read every scan.
type linkStatic struct {
	link    Link
	dynamic bool
	// missedKnown says the kernel's link info has the missed field.
	missedKnown bool
	seen        uint64
}

// Reader reads every program and link in the kernel. It is not safe for
// concurrent use; the Agent serialises scans.
type Reader struct {
	seq    uint64
	progs  map[uint32]*progStatic
	links  map[uint32]*linkStatic
	facts  map[uint32]ProgFacts
	source FactsSource
	// loadFacts loads the FactsSource on first need; factsErr remembers
	// why it could not.
	loadFacts func() (FactsSource, error)
	factsErr  error
	btf       *btfNames
	nameBuf   []byte
	fdinfo    bpfsys.FdinfoDir
	// scratch is the sequential read's; parallel readers have their own.
	scratch scratch
	// parallel is how many goroutines read first-seen programs.
	parallel int
	// iter is the iterator scan source (scan_iter.go), nil on the syscall
	// path; fallback says why it is nil.
	iter     statsIter
	stats    []progstats.Stat
	whole    []progstats.Record
	fallback string
	// order is the statics of the programs the last iterator read
	// returned, in its (ascending id) order; orderBuf is the spare buffer
	// the next read fills. Nil order on the syscall path.
	order, orderBuf []*progStatic
	// metas, instead of order, are the programs' metas of a one-shot
	// read (readIterOnce), which keeps no progStatic.
	metas []progMeta
	// cacheDir is the iterators' CO-RE cache ("" for none); cacheErr is
	// the first load's complaint about it, kept for Losses.
	cacheDir string
	cacheErr error
	// pin is the bpffs pin iter was opened from ("" when loaded here).
	pin string
	// knownMax is the highest id the last iterator read kept.
	knownMax uint32
	progBuf  []Program
	// iterChecked says the first read passed checkRecords.
	iterChecked bool
	// oneShot: this reader scans once (Config.OneShot), so it caches
	// nothing for a next scan.
	oneShot bool
	// lsrc is the bpf_link iterator source (scan_links.go).
	lsrc linkSource
	// steady is the no-walk statistics read (scan_steady.go).
	steady steadySource
	// inPlace says the last readIter left every program in the slot of
	// progBuf it had the read before, in the same order, none new.
	inPlace bool
	// lastLinks are the last scan's links as read, before join.
	lastLinks []Link
	// targets names link targets and their classes (targets.go).
	targets targetState
	// progInfoLen is the kernel's bpf_prog_info size (its info_len
	// answer), 0 until a program was read: what Losses says the kernel
	// lacks. Atomic: parallel readers note it.
	progInfoLen atomic.Uint32
	// joinsKept says this scan found the same programs in the same slots
	// and the same links (kprobe missed counters included) as the last
	// one, so join was skipped: every program's joins, owners and miss
	// kind are the last scan's, as they stand in its slot.
	joinsKept bool
}

func newReader() *Reader {
	r := &Reader{
		progs:   map[uint32]*progStatic{},
		links:   map[uint32]*linkStatic{},
		facts:   map[uint32]ProgFacts{},
		btf:     newBTFNames(),
		nameBuf: make([]byte, 512),
		fdinfo:  bpfsys.NewFdinfoDir(),
	}
	r.scratch = newScratch(&r.fdinfo)
	return r
}

// ErrPrivilege is returned when the kernel refuses to enumerate programs.
var ErrPrivilege = errors.New("the kernel refused to list BPF programs: bpfleet needs CAP_SYS_ADMIN (GET_NEXT_ID/GET_FD_BY_ID), CAP_BPF and CAP_PERFMON; run as root or grant them")

// View is the programs of one scan: a []Program, or, from a one-shot
// scan (readIterOnce), the Programs of a []ProgramStat, built where the
// snapshot has them so that Agent.Scan copies none.
type View struct {
	Progs []Program
	Stats []ProgramStat
}

// Len is how many programs the scan read.
func (v View) Len() int {
	if v.Stats != nil {
		return len(v.Stats)
	}
	return len(v.Progs)
}

// At is the i-th program the scan read.
func (v View) At(i int) *Program {
	if v.Stats != nil {
		return &v.Stats[i].Program
	}
	return &v.Progs[i]
}

// Without is the view less the programs with the given ids: a copy where
// any is present, v itself otherwise (the reader's buffers are not
// touched).
func (v View) Without(ids []uint32) View {
	drop := func(id uint32) bool { return slices.Contains(ids, id) }
	if v.Stats != nil {
		if !slices.ContainsFunc(v.Stats, func(s ProgramStat) bool { return drop(s.ID) }) {
			return v
		}
		return View{Stats: slices.DeleteFunc(slices.Clone(v.Stats), func(s ProgramStat) bool { return drop(s.ID) })}
	}
	if !slices.ContainsFunc(v.Progs, func(p Program) bool { return drop(p.ID) }) {
		return v
	}
	return View{Progs: slices.DeleteFunc(slices.Clone(v.Progs), func(p Program) bool { return drop(p.ID) })}
}

// OwnProgram is the id of the stats iterator program the reader loaded
// itself (not a running agent's pin), 0 when it has none.
func (r *Reader) OwnProgram() uint32 {
	if r.iter == nil || r.pin != "" {
		return 0
	}
	return r.iter.ProgramID()
}

// read returns every program in the kernel, with links and iterator facts
// joined, plus the scan's own accounting.
func (r *Reader) read(now time.Time) ([]Program, ScanStats, error) {
	v, st, err := r.ReadView(now)
	if v.Stats != nil {
		progs := make([]Program, len(v.Stats))
		for i := range v.Stats {
			progs[i] = v.Stats[i].Program
		}
		return progs, st, err
	}
	return v.Progs, st, err
}

// ReadView is read, the programs of a one-shot scan left in their
// snapshot's slice.
func (r *Reader) ReadView(now time.Time) (View, ScanStats, error) {
	r.seq++
	st := ScanStats{Walk: true} // readIter says when it did not walk
	bootWall := bootTimeWall(now)

	r.metas = nil
	if r.iter != nil {
		var v View
		var err error
		if r.oneShot && r.order == nil {
			v.Stats, err = r.readIterOnce(bootWall, &st)
		} else {
			v.Progs, err = r.readIter(bootWall, &st)
		}
		if err == nil {
			return r.finish(v, &st, false, r.order, r.metas)
		}
		// A read that fails mid-way is not half a snapshot: leave the
		// iterator for good and read this scan by syscall.
		if ce := (checkError{}); errors.As(err, &ce) {
			r.fallBack(ce.Error())
		} else {
			r.fallBack(fmt.Sprintf("iterator read failed, scanning by syscall from now on: %v", err))
		}
		st = ScanStats{Walk: true}
	}

	progs := make([]Program, 0, len(r.progs)+8)
	denied, wantFacts := false, false
	err := r.readProgs(bootWall, func(res progRead) {
		if errors.Is(res.err, unix.EPERM) && len(progs) == 0 {
			denied = true
		}
		if r.keep(&st, res.err) {
			res.static.seen = r.seq
			if res.fresh {
				r.progs[res.prog.ID] = res.static
			}
			wantFacts = wantFacts || needsFacts(res.static.progTypeID)
			progs = append(progs, res.prog)
		}
	})
	if errors.Is(err, unix.EPERM) || denied && len(progs) == 0 {
		return View{}, st, ErrPrivilege
	}
	if err != nil {
		return View{}, st, err
	}
	return r.finish(View{Progs: progs}, &st, wantFacts, nil, nil)
}

// finish reads the links and, on the syscall path, the iterator facts, and
// joins them to progs (statics: as in join).
func (r *Reader) finish(progs View, st *ScanStats, wantFacts bool, statics []*progStatic, metas []progMeta) (View, ScanStats, error) {
	st.Source, st.FallbackReason = r.Source()
	if r.iter != nil {
		st.IteratorPin = r.pin
	}
	links, err := r.readLinks(st)
	if err != nil {
		return View{}, *st, err
	}

	if wantFacts && r.iter == nil {
		r.ensureFacts()
	}
	if r.source != nil && r.iter == nil {
		if err := r.source.ReadFacts(r.facts); err != nil {
			st.Errors++
			st.AddError(fmt.Errorf("reading bpf_prog iterator: %w", err))
			clear(r.facts)
		}
	}

	// The steady state: the same programs in the same slots and the same
	// links join as they did, so the slots' joins stand. Otherwise each
	// slot's joins are reset (readIter leaves them) and joined again.
	r.joinsKept = statics != nil && r.inPlace && sameLinkList(links, r.lastLinks)
	r.inPlace = false
	if !r.joinsKept {
		for i := range statics {
			resetJoins(progs.At(i), &statics[i].prog)
		}
		r.join(progs, links, statics, metas)
	}
	r.lastLinks = links
	r.evict(progs.Len(), len(links))
	st.Programs = progs.Len()
	st.Links = len(links)
	return progs, *st, nil
}

// AddError keeps the message of an error the scan counted in Errors (the
// first eight).
func (st *ScanStats) AddError(err error) {
	const maxMsgs = 8
	if len(st.ErrorMsgs) < maxMsgs {
		st.ErrorMsgs = append(st.ErrorMsgs, err.Error())
	}
}

// keep accounts for one object's read error and says whether to keep it.
func (r *Reader) keep(st *ScanStats, err error) bool {
	switch {
	case err == nil:
		return true
	case cameOrWent(err):
		st.Vanished++
	default:
		st.Errors++
		st.AddError(err)
	}
	return false
}

// cameOrWent reports whether err is the kernel's answer for an object that
// is appearing or disappearing under the scan, not a failure to read it:
// ENOENT for one freed between GET_NEXT_ID and GET_FD_BY_ID, EAGAIN for a
// link whose id is allocated but not yet settled (bpf_link_settle) or that
// is being torn down.
func cameOrWent(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAGAIN)
}

// retryTransient reads once more after an answer that says the object is
// coming or going: a link caught mid-create is usually settled a moment
// later. A second such answer is final (the caller counts it as vanished).
func retryTransient[T any](read func() (T, error)) (T, error) {
	v, err := read()
	if err != nil && cameOrWent(err) {
		v, err = read()
	}
	return v, err
}

// progRead is one program's read: fresh says it was seen for the first
// time, so static is new and must be cached.
type progRead struct {
	prog   Program
	static *progStatic
	fresh  bool
	err    error
}

// readBatch is how many ids a reading goroutine takes at a time.
const readBatch = 64

// readProgs reads every program and hands each read to keep, in id order:
// the counters of those seen before, everything of those seen for the
// first time. With parallel > 1 one goroutine enumerates ids and the others
// read batches of them as they arrive, so the enumeration overlaps the
// reads and a first scan (`bpfleet list`, where every program is new and
// costs a map-id read and an fdinfo read) runs on every CPU.
func (r *Reader) readProgs(bootWall time.Time, keep func(progRead)) error {
	_ = r.fdinfo.Open() // unreadable: memory is absent, the rest read
	if r.parallel < 2 {
		defer r.scratch.fdinfo.Release()
		return r.eachProgID(func(id uint32) {
			keep(r.readOne(id, bootWall, &r.scratch)) // by value: a pointer would escape
		})
	}

	type batch struct {
		seq int
		ids []uint32
		out []progRead
	}
	todo := make(chan *batch, r.parallel)
	done := make(chan *batch, r.parallel)
	var workers sync.WaitGroup
	for range r.parallel {
		workers.Go(func() {
			sc := newScratch(&r.fdinfo)
			sc.whileOpen = r.scratch.whileOpen
			defer sc.fdinfo.Release()
			for b := range todo {
				b.out = make([]progRead, len(b.ids))
				for i, id := range b.ids {
					b.out[i] = r.readOne(id, bootWall, &sc)
				}
				done <- b
			}
		})
	}
	var enumErr error
	go func() {
		b := &batch{}
		enumErr = r.eachProgID(func(id uint32) {
			if b.ids = append(b.ids, id); len(b.ids) == readBatch {
				todo <- b
				b = &batch{seq: b.seq + 1}
			}
		})
		if len(b.ids) > 0 {
			todo <- b
		}
		close(todo)
		workers.Wait()
		close(done)
	}()
	var batches []*batch
	for b := range done {
		batches = append(batches, b)
	}
	sort.Slice(batches, func(i, j int) bool { return batches[i].seq < batches[j].seq })
	for _, b := range batches {
		for _, res := range b.out {
			keep(res)
		}
	}
	return enumErr
}

// eachProgID calls fn with every program id in ascending order.
func (r *Reader) eachProgID(fn func(uint32)) error {
	var id uint32
	for {
		next, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, id)
		if err != nil {
			return fmt.Errorf("listing programs after id %d: %w", id, err)
		}
		if !ok {
			return nil
		}
		id = next
		fn(id)
	}
}

// scratch is what one reading goroutine reuses from program to program.
type scratch struct {
	mapBuf []uint32
	fdinfo bpfsys.FdinfoFiles
	// infoLen is the info_len of the last program read.
	infoLen uint32
	// whileOpen is the Reader's (WhileOpen): tests only.
	whileOpen func(id uint32)
}

func newScratch(dir *bpfsys.FdinfoDir) scratch {
	return scratch{mapBuf: make([]uint32, 64), fdinfo: bpfsys.NewFdinfoFiles(dir)}
}

// readOne reads one program, whole when it was not seen before. The cache
// is only read here, so concurrent calls (each with its own scratch) are
// safe.
func (r *Reader) readOne(id uint32, bootWall time.Time, sc *scratch) progRead {
	cached := r.progs[id]
	p, s, err := readProg(id, cached, bootWall, sc)
	if err != nil && cameOrWent(err) {
		p, s, err = readProg(id, cached, bootWall, sc) // see retryTransient
	}
	if err == nil && r.progInfoLen.Load() != sc.infoLen {
		r.progInfoLen.Store(sc.infoLen)
	}
	return progRead{prog: p, static: s, fresh: cached == nil, err: err}
}

// readProg is GET_FD_BY_ID → OBJ_GET_INFO_BY_FD → close: the fd never
// outlives the call, so the agent never keeps another tool's program alive.
// With cached == nil it also reads what never changes and returns it.
func readProg(id uint32, cached *progStatic, bootWall time.Time, sc *scratch) (Program, *progStatic, error) {
	fd, err := bpfsys.FDByID(bpfsys.CmdProgGetFDByID, id)
	if err != nil {
		return Program{}, nil, fmt.Errorf("opening prog %d: %w", id, err)
	}
	defer bpfsys.CloseFD(fd)
	if sc.whileOpen != nil {
		sc.whileOpen(id)
	}

	var info bpfsys.ProgInfo
	if cached == nil {
		info.NrMapIDs = uint32(len(sc.mapBuf))
		info.MapIDs = uint64(uintptr(unsafe.Pointer(&sc.mapBuf[0])))
	}
	n, err := bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)))
	if err != nil {
		return Program{}, nil, fmt.Errorf("reading prog %d info: %w", id, err)
	}
	if cached == nil {
		if int(info.NrMapIDs) > len(sc.mapBuf) {
			// More maps than the buffer held: grow it and ask again.
			sc.mapBuf = make([]uint32, info.NrMapIDs)
			info = bpfsys.ProgInfo{NrMapIDs: uint32(len(sc.mapBuf)), MapIDs: uint64(uintptr(unsafe.Pointer(&sc.mapBuf[0])))}
			if n, err = bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info))); err != nil {
				return Program{}, nil, fmt.Errorf("reading prog %d map ids: %w", id, err)
			}
		}
		cached = newProgStatic(fd, &info, n, bootWall, sc)
	}

	sc.infoLen = n
	p := cached.prog
	p.RunCount = info.RunCnt
	p.RunTimeNs = info.RunTimeNs
	if n >= bpfsys.ProgInfoEndRecursionMisses {
		m := info.RecursionMisses
		p.RecursionMisses = &m
	}
	return p, cached, nil
}

func newProgStatic(fd int, info *bpfsys.ProgInfo, n uint32, bootWall time.Time, sc *scratch) *progStatic {
	s := &progStatic{prog: Program{
		ID:         info.ID,
		Name:       unix.ByteSliceToString(info.Name[:]),
		Tag:        hex.EncodeToString(info.Tag[:]),
		Type:       ProgTypeName(info.Type),
		LoadTime:   bootWall.Add(time.Duration(info.LoadTime)),
		BTFID:      info.BTFID,
		JitedSize:  info.JitedProgLen,
		XlatedSize: info.XlatedProgLen,
		AttachType: Unattached,
	}}
	// created_by_uid and map ids arrived together (4.15); a kernel without
	// them reports zero map ids and uid 0, indistinguishable from root.
	uid := info.CreatedByUID
	s.prog.UID = &uid
	s.prog.MapIDs = append([]uint32{}, sc.mapBuf[:min(int(info.NrMapIDs), len(sc.mapBuf))]...)
	if n >= bpfsys.ProgInfoEndVerifiedInsns {
		v := info.VerifiedInsns
		s.prog.VerifiedInsns = &v
	}
	if n >= bpfsys.ProgInfoEndAttachBTFID {
		s.attachBTFObjID, s.attachBTFID = info.AttachBTFObjID, info.AttachBTFID
	}
	if m, ok := sc.fdinfo.Memlock(fd, info.ID); ok {
		s.prog.Memlock = &m
	}
	s.progTypeID = info.Type
	return s
}

// evict forgets programs and links not seen in this scan: ids are never
// reused within a boot, so a gone id is gone for good.
func (r *Reader) evict(progs, links int) {
	// Every cached entry was seen when the counts match: nothing to walk.
	if len(r.progs) != progs {
		for id, s := range r.progs {
			if s.seen != r.seq {
				delete(r.progs, id)
			}
		}
	}
	if len(r.links) != links {
		for id, c := range r.links {
			if c.seen != r.seq {
				delete(r.links, id)
			}
		}
	}
}

// bootTimeWall is the wall-clock time of boot, so that load_time (ns since
// boot) becomes a timestamp.
func bootTimeWall(now time.Time) time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}
	}
	return now.Add(-time.Duration(ts.Nano()))
}
