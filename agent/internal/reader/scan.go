package reader

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
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

// readLinks lists every link. A link's attachment never changes, so only
// links with a counter (kprobe missed) are opened again on later scans;
// the rest cost one GET_NEXT_ID each.
func (r *Reader) readLinks(st *ScanStats) ([]Link, error) {
	if links, ok := r.readLinksIter(st); ok { // scan_links.go
		return links, nil
	}
	links := make([]Link, 0, len(r.links)+4)
	var id uint32
	for {
		next, ok, err := bpfsys.NextID(bpfsys.CmdLinkGetNextID, id)
		if errors.Is(err, unix.EINVAL) && id == 0 {
			return links, nil // kernel without BPF links (< 5.8)
		}
		if err != nil {
			return nil, fmt.Errorf("listing links after id %d: %w", id, err)
		}
		if !ok {
			return links, nil
		}
		id = next
		c := r.links[id]
		if c != nil && !c.dynamic {
			c.seen = r.seq
			links = append(links, c.link)
			continue
		}
		l, err := retryTransient(func() (Link, error) { return r.readLink(id, c) })
		switch {
		case err != nil && cameOrWent(err):
			st.Vanished++
			continue
		case err != nil:
			st.Errors++
			st.AddError(err)
			continue
		}
		links = append(links, l)
	}
}

func (r *Reader) readLink(id uint32, c *linkStatic) (Link, error) {
	fd, err := bpfsys.FDByID(bpfsys.CmdLinkGetFDByID, id)
	if err != nil {
		return Link{}, fmt.Errorf("opening link %d: %w", id, err)
	}
	defer bpfsys.CloseFD(fd)

	var info bpfsys.LinkInfo
	n, err := bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)))
	if err != nil {
		return Link{}, fmt.Errorf("reading link %d info: %w", id, err)
	}
	if c == nil {
		d := bpfsys.DecodeLink(&info, n, func(ptrOff, lenOff int) string { return r.linkName(fd, ptrOff, lenOff) })
		c = r.newLinkStatic(&d) // link_names.go
		r.links[id] = c
	}
	c.seen = r.seq
	l := c.link
	if c.missedKnown {
		m := info.KprobeMissed()
		l.Missed = &m
	}
	return l, nil
}

// linkName asks the kernel for a link's name string (tracepoint, function,
// path) with a second OBJ_GET_INFO call that hands it a buffer.
func (r *Reader) linkName(fd int, ptrOff, lenOff int) string {
	var info bpfsys.LinkInfo
	info.SetU64(ptrOff, uint64(uintptr(unsafe.Pointer(&r.nameBuf[0]))))
	info.SetU32(lenOff, uint32(len(r.nameBuf)))
	if _, err := bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info))); err != nil {
		return ""
	}
	return unix.ByteSliceToString(r.nameBuf)
}

// join attaches links and iterator facts to programs and derives each
// program's attach type, target and sleepable flag. statics, when not nil,
// are the programs' cached parts in progs' order (the iterator path);
// otherwise they are looked up by id.
func (r *Reader) join(progs View, links []Link, statics []*progStatic, metas []progMeta) {
	// Programs come in ascending id order (both sources read in id
	// order): then each program's links are one run of the links sorted
	// by program id, found by a merge, without a map.
	ascending := true
	n := progs.Len()
	for i := 1; i < n && ascending; i++ {
		ascending = progs.At(i-1).ID < progs.At(i).ID
	}
	var byProg map[uint32][]Link
	sorted := make([]Link, len(links)) // this scan's own: snapshots share it, nothing else writes it
	copy(sorted, links)
	sort.Slice(sorted, func(a, b int) bool {
		if sorted[a].ProgID != sorted[b].ProgID {
			return sorted[a].ProgID < sorted[b].ProgID
		}
		return sorted[a].ID < sorted[b].ID
	})
	if !ascending {
		byProg = make(map[uint32][]Link, len(links))
		for i := range sorted {
			byProg[sorted[i].ProgID] = append(byProg[sorted[i].ProgID], sorted[i])
		}
	}
	k := 0
	sleepable := make([]bool, n) // one allocation for every flag of the scan
	for i := range n {
		p := progs.At(i)
		var s *progMeta
		var f ProgFacts
		var haveFacts bool
		switch {
		case metas != nil:
			s = &metas[i]
			f, haveFacts = s.facts, s.haveFacts
		case statics != nil:
			s = &statics[i].progMeta
			f, haveFacts = s.facts, s.haveFacts
		default:
			if ps := r.progs[p.ID]; ps != nil {
				s = &ps.progMeta
			}
			f, haveFacts = r.facts[p.ID]
		}
		if haveFacts && f.SleepableKnown {
			sleepable[i] = f.Sleepable
			p.Sleepable = &sleepable[i]
		}
		if ascending {
			for k < len(sorted) && sorted[k].ProgID < p.ID {
				k++
			}
			e := k
			for e < len(sorted) && sorted[e].ProgID == p.ID {
				e++
			}
			p.Links, k = sorted[k:e:e], e
		} else {
			p.Links = byProg[p.ID]
		}
		p.Owners = []Owner{} // JSON readers get [] rather than null
		if len(p.Links) == 0 {
			p.Links = []Link{}
			continue
		}
		for j := range p.Links {
			l := &p.Links[j]
			switch {
			case l.Type == "perf_event" && l.AttachType == "perf_event" && s.progTypeID != progTypePerfEvent:
				// Kernels before 6.6 give no perf_event link details: the
				// program type is all there is (a kprobe-type program may
				// also be a kretprobe or uprobe; the kernel does not say).
				l.AttachType = ProgTypeName(s.progTypeID)
			case l.Type == "raw_tracepoint" && s.progTypeID == progTypeTracing:
				l.AttachType = tracingAttachName(attachTraceRawTP, p.Sleepable)
			case l.Type == "tracing":
				if haveFacts {
					l.AttachType = tracingAttachName(f.ExpectedAttachType, p.Sleepable)
				} else if l.AttachType != "" && p.Sleepable == nil {
					// Without the iterator a sleepable program cannot be
					// told from a plain one; say so rather than guess.
					l.AttachType += "?"
				}
				if l.Target == "" {
					l.Target = f.AttachFunc
				}
				if l.Target == "" {
					l.Target = r.btf.name(s.attachBTFObjID, s.attachBTFID)
				}
			}
		}
		p.AttachType = p.Links[0].AttachType
		p.AttachTarget = joinTargets(p.Links)
		p.TargetClass = JoinClasses(p.Links)
	}
}

// Rejoin joins a scan whose joins were kept (JoinsKept) again, from its
// slots' statics and its links: for an owner refresh, whose answers replace
// what the kept joins carry.
func (r *Reader) Rejoin(progs View) {
	if !r.joinsKept {
		return
	}
	for i := range r.order {
		resetJoins(progs.At(i), &r.order[i].prog)
	}
	r.join(progs, r.lastLinks, r.order, nil)
	r.joinsKept = false
}

// sameLinkList says whether two scans read the same links: same ids for the
// same programs, same counters (a link's other fields are cached by id).
func sameLinkList(a, b []Link) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].ProgID != b[i].ProgID || !prog.SameValue(a[i].Missed, b[i].Missed) ||
			!prog.SameValue(a[i].MissedNesting, b[i].MissedNesting) || !prog.SameValue(a[i].MissedMaxactive, b[i].MissedMaxactive) {
			return false
		}
	}
	return true
}

// joinTargets names up to three distinct targets of a program's links.
func joinTargets(links []Link) string {
	if len(links) == 1 {
		return links[0].Target // nothing to join: no allocation
	}
	ts := make([]string, len(links))
	for i, l := range links {
		ts[i] = l.Target
	}
	return JoinStrings(ts)
}

// JoinStrings joins up to three distinct non-empty strings.
func JoinStrings(ss []string) string {
	var out []string
	for _, s := range ss {
		if s == "" || contains(out, s) {
			continue
		}
		if len(out) == 3 {
			out = append(out, "…")
			break
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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
