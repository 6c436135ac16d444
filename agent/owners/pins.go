package owners

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Pin is one bpffs file that pins a program, or a link of a program.
type Pin struct {
	Path   string
	ProgID uint32
	// LinkID is non-zero when the pin is a link (of ProgID).
	LinkID uint32
}

// PinOptions bound the bpffs walk.
type PinOptions struct {
	// MaxDepth is how many directory levels below a root are entered.
	// Default 8.
	MaxDepth int
	// MaxFiles is how many files are opened over all roots. Default 10000.
	MaxFiles int
}

// PinStats counts a pin walk's work.
type PinStats struct {
	// Files counts the pinned files looked at: opened, or known from an
	// earlier walk.
	Files int `json:"files"`
	// Opened counts the files opened (BPF_OBJ_GET): those not known from
	// an earlier walk.
	Opened int `json:"opened"`
	// Skipped counts pinned objects that are neither programs nor links
	// (maps), files BPF_OBJ_GET does not open (the preloaded iterators
	// maps.debug and progs.debug answer ENOENT), and files past MaxFiles.
	Skipped   int    `json:"skipped"`
	Errors    int    `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// Denied counts the errors that were permission refusals (a
	// directory another user owns, without CAP_DAC_READ_SEARCH).
	Denied int `json:"denied"`
	// Truncated is true when MaxDepth or MaxFiles stopped the walk.
	Truncated bool `json:"truncated"`
	// DirsListed counts the directories read with getdents, DirsKept
	// those whose listing was reused (their ctime unchanged).
	DirsListed int `json:"dirs_listed"`
	DirsKept   int `json:"dirs_kept"`
}

// ScanPins walks bpffs mount points (default /sys/fs/bpf) once and returns
// the programs and links pinned there (PinScanner.Scan with nothing
// remembered).
func ScanPins(roots []string, opt PinOptions) ([]Pin, PinStats) {
	s := NewPinScanner(opt)
	defer s.Close()
	return s.Scan(roots)
}

// PinScanner finds the programs and links pinned in bpffs. A pinned file
// it has not seen is opened with BPF_OBJ_GET, identified (by its fd's
// /proc/self/fd link, and a program's or link's ids asked of the kernel)
// and closed at once: a held fd would keep an unpinned program alive. What
// each file is, is remembered by inode: an object stays the same while
// pinned, and bpffs gives every new pin a new inode (get_next_ino), so a
// later walk opens only the files that are new. On a node with thousands
// of pinned maps (Cilium's) a walk after a reload costs a getdents entry
// per pin in a changed directory, nothing per map in an unchanged one
// (dirCache). It is not safe for concurrent use.
type PinScanner struct {
	opt   PinOptions
	known map[pinInode]pinFacts
	// dirs are the directories listed before, by inode, kept while their
	// ctime stays the same (dirCache).
	dirs  map[pinInode]*dirCache
	gen   uint32
	dents []byte
	info  []byte
	// selfFD is /proc/self/fd, opened on first need (selfOpen); -1 and
	// selfErr when refused. name and link are readlinkat's buffers.
	selfOpen bool
	selfFD   int
	selfErr  error
	name     []byte
	link     [32]byte
}

type pinInode struct{ dev, ino uint64 }

// pinFacts is what a pinned file is: a program's or a link's pin, or
// neither (a map, or a file BPF_OBJ_GET does not open).
type pinFacts struct {
	progID, linkID uint32
	gen            uint32   // the last walk that saw it
	dir            pinInode // its directory
}

// dirCache is a directory's listing as of its ctime. bpffs sets a
// directory's ctime (and mtime) whenever an entry is pinned, made or
// removed in it (bpf_dentry_finalize, simple_unlink), so while the ctime
// stays the same the listing does: a walk reuses it rather than listing
// the directory again (on a node with 30,000 pinned maps, the listing is
// most of a walk once every file is known). A listing taken less than
// racyDir after the ctime is not kept: the clock that stamps it is coarse,
// and a change in the same tick would leave it unchanged.
type dirCache struct {
	ctime unix.Timespec
	ents  []pinEntry // as entries returns them: pins, new files, subdirectories
	maps  int        // the files it counted as known maps (not in ents)
	kept  uint32     // the last walk that reused the listing
	seen  uint32     // the last walk that listed or reused it
}

// racyDir is how long after a directory's ctime its listing is kept.
var racyDir = time.Second

// NewPinScanner returns a PinScanner bounded by opt.
func NewPinScanner(opt PinOptions) *PinScanner {
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = 8
	}
	if opt.MaxFiles <= 0 {
		opt.MaxFiles = 10000
	}
	return &PinScanner{opt: opt, known: map[pinInode]pinFacts{}, dirs: map[pinInode]*dirCache{}}
}

// Scan walks the roots (default /sys/fs/bpf). MaxFiles bounds the files
// opened, not the ones remembered from earlier walks.
func (s *PinScanner) Scan(roots []string) ([]Pin, PinStats) {
	if len(roots) == 0 {
		roots = []string{"/sys/fs/bpf"}
	}
	if s.dents == nil {
		s.dents, s.info = make([]byte, 32<<10), make([]byte, 4<<10)
	}
	s.gen++
	w := pinWalker{s: s}
	for _, r := range roots {
		w.dir(r, 0)
	}
	for k, f := range s.known {
		// A file in a directory whose listing was reused is still there.
		if d := s.dirs[f.dir]; f.gen != s.gen && (d == nil || d.kept != s.gen) {
			delete(s.known, k) // unpinned
		}
	}
	for k, d := range s.dirs {
		if d.seen != s.gen {
			delete(s.dirs, k) // not walked: removed, or past a cut-short walk
		}
	}
	return w.pins, w.st
}

type pinWalker struct {
	s    *PinScanner
	st   PinStats
	pins []Pin
}

func (w *pinWalker) fail(err error) {
	w.st.Errors++
	w.st.LastError = err.Error()
	if errors.Is(err, os.ErrPermission) {
		w.st.Denied++
	}
}

func (w *pinWalker) dir(dir string, depth int) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if depth > 0 && errors.Is(err, unix.ENOENT) {
			return // removed mid-walk
		}
		w.fail(fmt.Errorf("reading bpffs directory: open %s: %w", dir, err))
		return
	}
	var st unix.Stat_t
	var ents []pinEntry
	var cache *dirCache
	if err = unix.Fstat(fd, &st); err == nil {
		key := pinInode{st.Dev, st.Ino}
		if c := w.s.dirs[key]; c != nil && c.ctime == st.Ctim {
			cache, ents = c, c.ents
			c.kept, c.seen = w.s.gen, w.s.gen
			w.st.Files += c.maps
			w.st.Skipped += c.maps
			w.st.DirsKept++
		} else {
			delete(w.s.dirs, key)
			listed := time.Now()
			var maps int
			ents, maps, err = w.entries(fd, key)
			w.st.DirsListed++
			// Name order, a directory's pins at its place, as os.ReadDir
			// lists.
			slices.SortFunc(ents, func(a, b pinEntry) int { return strings.Compare(a.name, b.name) })
			if err == nil && listed.Sub(time.Unix(st.Ctim.Unix())) > racyDir {
				cache = &dirCache{ctime: st.Ctim, ents: ents, maps: maps}
			}
		}
	}
	unix.Close(fd) // before descending: the depth must not cost fds
	if err != nil && !errors.Is(err, unix.ENOENT) {
		w.fail(fmt.Errorf("reading bpffs directory %s: %w", dir, err))
	}
	truncated, failed := w.st.Truncated, w.st.Errors
	defer func() {
		// Kept only where every entry was looked at: a walk cut short by
		// MaxFiles or an error lists the directory again.
		if cache != nil && cache.seen != w.s.gen && !w.st.Truncated && !truncated && w.st.Errors == failed {
			// The files found to be maps leave the listing for its count:
			// a reuse then visits the pins and subdirectories alone.
			cache.ents = slices.DeleteFunc(slices.Clone(cache.ents), func(e pinEntry) bool {
				f, ok := w.s.known[pinInode{st.Dev, e.ino}]
				isMap := !e.isDir && ok && f.progID == 0 && f.linkID == 0
				if isMap {
					cache.maps++
				}
				return isMap
			})
			cache.seen = w.s.gen
			w.s.dirs[pinInode{st.Dev, st.Ino}] = cache
		}
	}()
	for _, e := range ents {
		p := filepath.Join(dir, e.name)
		switch {
		case !e.isDir:
			w.file(p, pinInode{st.Dev, e.ino}, pinInode{st.Dev, st.Ino})
		case depth+1 > w.s.opt.MaxDepth:
			w.st.Truncated = true
		default:
			w.dir(p, depth+1)
		}
	}
}

// pinEntry is a directory entry the walk looks at by name: a directory, a
// pin, or a file not seen before.
type pinEntry struct {
	name  string
	ino   uint64
	isDir bool
}

// entries lists the open directory fd (dev its device). A file known from
// an earlier walk as no pin of a program or link (a map) is counted here
// and not listed: on a node of many pinned maps, nothing is allocated for
// them.
func (w *pinWalker) entries(fd int, dir pinInode) (ents []pinEntry, maps int, err error) {
	err = eachDirent(fd, w.s.dents, func(name []byte, ino uint64, typ byte) {
		switch typ {
		case unix.DT_REG:
			key := pinInode{dir.dev, ino}
			if f, ok := w.s.known[key]; ok && f.progID == 0 && f.linkID == 0 {
				f.gen = w.s.gen
				w.s.known[key] = f
				w.st.Files++
				w.st.Skipped++
				maps++
				return
			}
		case unix.DT_DIR:
		default:
			return
		}
		ents = append(ents, pinEntry{string(name), ino, typ == unix.DT_DIR})
	})
	return ents, maps, err
}

func (w *pinWalker) file(path string, key, dir pinInode) {
	f, known := w.s.known[key]
	if !known && w.st.Opened >= w.s.opt.MaxFiles {
		w.st.Truncated = true
		w.st.Skipped++
		return
	}
	w.st.Files++
	if !known {
		w.st.Opened++
		var ok bool
		if f, ok = w.open(path); !ok {
			return
		}
	}
	f.gen, f.dir = w.s.gen, dir
	w.s.known[key] = f
	if f.progID == 0 && f.linkID == 0 {
		w.st.Skipped++ // a map, or a file BPF_OBJ_GET does not open
		return
	}
	w.pins = append(w.pins, Pin{Path: path, ProgID: f.progID, LinkID: f.linkID})
}

// open identifies a pinned file the walk has not seen; ok is false where
// it could not (the walk's error, or unpinned since it was listed). What
// the fd is comes from its /proc/self/fd link ("anon_inode:bpf-map", ...;
// one readlinkat against an open directory), and a program's or a link's
// ids from a GET_INFO of 8 or 12 bytes: three or four syscalls against the
// five of opening, reading and closing its fdinfo (a path walk each), the
// way taken where /proc/self/fd cannot be read.
func (w *pinWalker) open(path string) (pinFacts, bool) {
	fd, err := bpfsys.ObjGet(path)
	if err == unix.ENOENT {
		// Unpinned mid-walk, or a file BPF_OBJ_GET does not open: the
		// kernel's preloaded iterators (maps.debug, progs.debug).
		return pinFacts{}, true
	}
	if err != nil {
		w.fail(fmt.Errorf("opening pin %s: %w", path, err))
		return pinFacts{}, false
	}
	defer unix.Close(fd)
	if f, err := w.s.identify(fd); err == nil {
		return f, true
	}
	b, err := readFile("/proc/self/fdinfo/"+strconv.Itoa(fd), &w.s.info)
	if err != nil {
		w.fail(fmt.Errorf("reading fdinfo of pin %s: %w", path, err))
		return pinFacts{}, false
	}
	fi := bpfsys.ParseFDInfo(b)
	return pinFacts{progID: fi.ProgID, linkID: fi.LinkID}, true
}

// identify tells what this process's BPF fd is by its /proc/self/fd link.
func (s *PinScanner) identify(fd int) (pinFacts, error) {
	if !s.selfOpen {
		s.selfOpen = true
		if s.selfFD, s.selfErr = unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); s.selfErr != nil {
			s.selfFD = -1
		}
	}
	if s.selfFD < 0 {
		return pinFacts{}, s.selfErr
	}
	name := strconv.AppendInt(s.name[:0], int64(fd), 10)
	s.name = append(name, 0)
	n, err := readlinkat(s.selfFD, &s.name[0], s.link[:])
	if err != nil {
		return pinFacts{}, err
	}
	switch string(s.link[:n]) {
	case linkBPFProg:
		_, prog, err := bpfsys.ObjIDs(fd, false)
		return pinFacts{progID: prog}, err
	case linkBPFLink, linkBPFLinkGot:
		link, prog, err := bpfsys.ObjIDs(fd, true)
		return pinFacts{progID: prog, linkID: link}, err
	}
	return pinFacts{}, nil // a map, BTF, or no BPF object at all
}

// Close releases the scanner's /proc/self/fd directory.
func (s *PinScanner) Close() {
	if s.selfOpen && s.selfFD >= 0 {
		unix.Close(s.selfFD)
	}
	s.selfOpen = false
}

// PinsByProg groups pin paths by program id; a link's pin counts for its
// program.
func PinsByProg(pins []Pin) map[uint32][]string {
	m := make(map[uint32][]string, len(pins))
	for _, p := range pins {
		if p.ProgID != 0 {
			m[p.ProgID] = append(m[p.ProgID], p.Path)
		}
	}
	return m
}
