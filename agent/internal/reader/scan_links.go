package reader

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/linkstats"
	"golang.org/x/sys/unix"
)

// The links' scan source: with the iterator scan source active, every link
// is read from one pass of an iter/bpf_link program (probes/linkstats),
// which writes each link's bpf_link_info as BPF_OBJ_GET_INFO_BY_FD would,
// kprobe `missed` included; only a link the program cannot read on this
// kernel (a uprobe, a struct that moved) is read by syscall. Without it a
// scan costs one GET_NEXT_ID per link, and GET_FD_BY_ID, OBJ_GET_INFO and
// close for every new link and every kprobe link on every scan.

// linkIter is what the reader needs of probes/linkstats.
type linkIter interface {
	Read(dst []linkstats.Record) ([]linkstats.Record, error)
	SetKnownMaxID(id uint32) error
	ProgramID() uint32
	Close() error
}

// linkSource is the reader's state for the links' source.
type linkSource struct {
	iter linkIter
	// tried says the iterator was loaded (or refused) once: the source
	// is chosen once per agent, on the first scan that uses the
	// iterator scan source.
	tried    bool
	checked  bool
	fallback string
	recs     []linkstats.Record
	// knownMax is the highest id of the last read: every link up to it
	// is held in reader.links or was unreadable or gone.
	knownMax uint32
	// load loads the iterator; tests replace it.
	load func() (linkIter, error)
}

func (r *Reader) loadLinkIter() (linkIter, error) {
	it, li, err := linkstats.LoadCached(r.cacheDir)
	r.noteCache(li.CacheErr)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// readLinksIter reads every link from the iterator when the scan source is
// the iterator; ok=false sends the caller to the syscall path. The source
// and why it is not the iterator go into st either way.
func (r *Reader) readLinksIter(st *ScanStats) ([]Link, bool) {
	ls := &r.lsrc
	if r.iter == nil {
		r.closeLinks()
		st.LinksSource, st.LinksFallbackReason = ScanSourceSyscall, "programs are read by syscall"
		if ls.fallback != "" {
			st.LinksFallbackReason = ls.fallback
		}
		return nil, false
	}
	if !ls.tried && r.oneShot {
		// A one-shot list (reading a running agent's pinned bpf_prog
		// iterator, or one it loaded from the CO-RE cache): loading a
		// link iterator (3 ms from the cache) costs more than the
		// per-link syscalls of one scan.
		ls.tried = true
		ls.fallback = "one scan: loading the bpf_link iterator costs more than the per-link reads it replaces"
	}
	if !ls.tried {
		ls.tried = true
		load := ls.load
		if load == nil {
			load = r.loadLinkIter
		}
		it, err := load()
		if err != nil {
			ls.fallback = fallbackReason(err, "bpf_link")
		} else {
			ls.iter = it
		}
	}
	if ls.iter == nil {
		st.LinksSource, st.LinksFallbackReason = ScanSourceSyscall, ls.fallback
		return nil, false
	}
	links, err := r.linksFromIter(st)
	if err != nil {
		// A failed read is not half a list: leave the iterator for good.
		ls.iter.Close()
		ls.iter = nil
		ls.fallback = fmt.Sprintf("bpf_link iterator read failed, reading links by syscall from now on: %v", err)
		st.LinksSource, st.LinksFallbackReason = ScanSourceSyscall, ls.fallback
		return nil, false
	}
	st.LinksSource = ScanSourceIterator
	return links, true
}

// linksFromIter turns one pass of the iterator into links, decoding each
// new link's info with the syscall path's own decoder (bpfsys.DecodeLink,
// newLinkStatic).
func (r *Reader) linksFromIter(st *ScanStats) ([]Link, error) {
	ls := &r.lsrc
	// Links up to the highest id of the last read need no fields: the
	// iterator writes their id and type only (kprobe links aside).
	if err := ls.iter.SetKnownMaxID(ls.knownMax); err != nil {
		return nil, err
	}
	recs, err := ls.iter.Read(ls.recs)
	ls.recs = recs
	if err != nil {
		return nil, err
	}
	if !ls.checked {
		if err := checkLinkRecords(ls.iter.ProgramID(), recs); err != nil {
			return nil, err
		}
		ls.checked = true
	}
	links := make([]Link, 0, len(recs))
	var missed []uint64 // one allocation for the scan's missed counters
	var maxID uint32
	for i := range recs {
		rec := &recs[i]
		if rec.ID == 0 {
			continue // not settled; the program skips these already
		}
		c := r.links[rec.ID]
		maxID = max(maxID, rec.ID)
		if !rec.Whole || !rec.Known {
			// Held since an earlier read, or read by syscall as the
			// syscall path does (once, or on every scan for a kprobe link
			// the iterator cannot read).
			if c != nil && !c.dynamic {
				c.seen = r.seq
				links = append(links, c.link)
				continue
			}
			l, err := retryTransient(func() (Link, error) { return r.readLink(rec.ID, c) })
			if r.keep(st, err) {
				links = append(links, l)
			}
			continue
		}
		var info bpfsys.LinkInfo
		if c == nil || c.missedKnown {
			info = bpfsys.LinkInfo{Type: rec.Type, ID: rec.ID, ProgID: rec.ProgID, U: rec.Info}
		}
		if c == nil {
			n := min(rec.InfoSize, uint32(unsafe.Sizeof(info)))
			name := rec.Name
			d := bpfsys.DecodeLink(&info, n, func(int, int) string { return name })
			c = r.newLinkStatic(&d)
			r.links[rec.ID] = c
		}
		c.seen = r.seq
		l := c.link
		if c.missedKnown {
			if missed == nil {
				// Room for the sum and its two parts of every link
				// left, so the pointers below never move.
				missed = make([]uint64, 0, 3*(len(recs)-i))
			}
			missed = append(missed, info.KprobeMissed())
			l.Missed = &missed[len(missed)-1]
			if nesting, maxactive, ok := rec.MissedSplit(); ok {
				missed = append(missed, nesting, maxactive)
				l.MissedNesting = &missed[len(missed)-2]
				l.MissedMaxactive = &missed[len(missed)-1]
			}
		}
		links = append(links, l)
	}
	ls.knownMax = maxID
	return links, nil
}

// checkLinkRecords holds the first read's record of the iterator's own
// link to what it must be: an iter link of the iterator program on
// bpf_link, read whole. A kernel that loads the program but reads nothing
// right is caught here, before any snapshot.
func checkLinkRecords(progID uint32, recs []linkstats.Record) error {
	for i := range recs {
		r := &recs[i]
		if r.ProgID != progID {
			continue
		}
		if !r.Known || r.Type != bpfsys.LinkTypeIter || r.Name != "bpf_link" {
			return fmt.Errorf("the bpf_link iterator's record of its own link is wrong (type %d, name %q, whole %v)", r.Type, r.Name, r.Known)
		}
		return nil
	}
	return fmt.Errorf("the bpf_link iterator did not list its own link (program %d)", progID)
}

// closeLinks releases the link iterator.
func (r *Reader) closeLinks() {
	if r.lsrc.iter != nil {
		r.lsrc.iter.Close()
		r.lsrc.iter = nil
	}
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
