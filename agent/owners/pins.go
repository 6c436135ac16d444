package owners

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

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
	Files int `json:"files"`
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
}

// ScanPins walks bpffs mount points (default /sys/fs/bpf) and returns the
// programs and links pinned there. Each pinned file is opened with
// BPF_OBJ_GET, identified from the agent's own fdinfo of that fd (the same
// parser as for other processes' fds, and no GET_INFO call), and closed at
// once: a held fd would keep an unpinned program alive.
func ScanPins(roots []string, opt PinOptions) ([]Pin, PinStats) {
	if len(roots) == 0 {
		roots = []string{"/sys/fs/bpf"}
	}
	if opt.MaxDepth <= 0 {
		opt.MaxDepth = 8
	}
	if opt.MaxFiles <= 0 {
		opt.MaxFiles = 10000
	}
	w := pinWalker{opt: opt, info: make([]byte, 4<<10)}
	for _, r := range roots {
		w.dir(r, 0)
	}
	return w.pins, w.st
}

type pinWalker struct {
	opt  PinOptions
	st   PinStats
	pins []Pin
	info []byte
}

func (w *pinWalker) fail(err error) {
	w.st.Errors++
	w.st.LastError = err.Error()
	if errors.Is(err, os.ErrPermission) {
		w.st.Denied++
	}
}

func (w *pinWalker) dir(dir string, depth int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if depth > 0 && errors.Is(err, os.ErrNotExist) {
			return // removed mid-walk
		}
		w.fail(fmt.Errorf("reading bpffs directory: %w", err))
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if depth+1 > w.opt.MaxDepth {
				w.st.Truncated = true
				continue
			}
			w.dir(p, depth+1)
		case e.Type().IsRegular():
			if w.st.Files >= w.opt.MaxFiles {
				w.st.Truncated = true
				w.st.Skipped++
				continue
			}
			w.st.Files++
			w.file(p)
		}
	}
}

func (w *pinWalker) file(path string) {
	fd, err := bpfsys.ObjGet(path)
	if err == unix.ENOENT {
		// Unpinned mid-walk, or a file BPF_OBJ_GET does not open: the
		// kernel's preloaded iterators (maps.debug, progs.debug).
		w.st.Skipped++
		return
	}
	if err != nil {
		w.fail(fmt.Errorf("opening pin %s: %w", path, err))
		return
	}
	b, err := readFile("/proc/self/fdinfo/"+strconv.Itoa(fd), &w.info)
	unix.Close(fd)
	if err != nil {
		w.fail(fmt.Errorf("reading fdinfo of pin %s: %w", path, err))
		return
	}
	fi := bpfsys.ParseFDInfo(b)
	if fi.ProgID == 0 && fi.LinkID == 0 {
		w.st.Skipped++ // a map
		return
	}
	w.pins = append(w.pins, Pin{Path: path, ProgID: fi.ProgID, LinkID: fi.LinkID})
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
