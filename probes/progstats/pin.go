package progstats

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// A pinned iterator lets a one-shot command (`bpfleet list`) read every
// program's record without loading the iterator itself (the verifier run
// and map creation cost ~10 ms, more than the syscall scan it would
// replace): the long-running agent loads a second instance of the
// iterator, separate from the one it scans with, and pins its iter link in
// bpffs; list opens the pin (BPF_OBJ_GET), creates an iterator fd from it
// (BPF_ITER_CREATE) and reads. The kernel opens a link pin read-write
// only (BPF_OBJ_GET with BPF_F_RDONLY is EINVAL for links).
//
// The pinned instance always returns whole records: nobody holds its
// known_max_id map (the agent's own instance sets its known_max_id every
// scan, so sharing it would hand list records without their static fields).
//
// The pin's name carries a hash of this package's BPF object and record
// size, and the possible-CPU count the instance sums over (a .rodata
// constant): a bpfleet whose object or decoder differs never opens a pin
// whose records it cannot decode; it finds no pin and falls back.

// PinDir is the directory, under a bpffs mount, that holds bpfleet's pins.
const PinDir = "bpfleet"

// bpffsMagic is BPF_FS_MAGIC (include/uapi/linux/magic.h).
const bpffsMagic = 0xcafe4a11

var objectHash = sync.OnceValue(func() string {
	h := sha256.New()
	h.Write(_ProgstatsBytes)
	binary.Write(h, binary.LittleEndian, uint32(recordSize))
	return hex.EncodeToString(h.Sum(nil))[:16]
})

// PinPath is where, under the bpffs mount bpffs, the iterator instance for
// this bpfleet's object and cpus possible CPUs is pinned.
func PinPath(bpffs string, cpus int) string {
	return filepath.Join(bpffs, PinDir, fmt.Sprintf("progstats-%s-%dcpu", objectHash(), cpus))
}

// checkBPFFS says whether dir is on a bpffs mount, in one line if not.
func checkBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("bpffs %s: %w", dir, err)
	}
	if uint32(st.Type) != bpffsMagic {
		return fmt.Errorf("%s is not a bpffs mount (mount -t bpf bpf %s)", dir, dir)
	}
	return nil
}

// Published is an iterator instance the agent has pinned for one-shot
// readers.
type Published struct {
	it     *Iter
	path   string
	linkID link.ID
}

// Publish loads a separate instance of the iterator for cpus possible CPUs
// and pins its link at PinPath(bpffs, cpus), replacing a pin already there
// (one left by an agent that did not exit cleanly, or another agent's on
// this node: either reads the same). The replacement is atomic (pinned
// under a temporary name, then renamed), so a reader never finds the path
// empty while an agent starts.
func Publish(bpffs string, cpus int) (*Published, error) {
	if err := checkBPFFS(bpffs); err != nil {
		return nil, err
	}
	it, err := Load(cpus)
	if err != nil {
		return nil, err
	}
	p := &Published{it: it, path: PinPath(bpffs, cpus)}
	info, err := it.link.Info()
	if err != nil {
		it.Close()
		return nil, fmt.Errorf("reading iterator link info: %w", err)
	}
	p.linkID = info.ID
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		it.Close()
		return nil, fmt.Errorf("creating pin directory: %w", err)
	}
	// bpffs refuses names with a dot (EPERM: reserved for the kernel).
	tmp := fmt.Sprintf("%s-tmp%d", p.path, os.Getpid())
	os.Remove(tmp)
	if err := it.link.Pin(tmp); err != nil {
		it.Close()
		return nil, fmt.Errorf("pinning iterator link at %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, p.path); err != nil {
		os.Remove(tmp)
		it.Close()
		return nil, fmt.Errorf("pinning iterator link at %s: %w", p.path, err)
	}
	return p, nil
}

// Path is where the instance is pinned.
func (p *Published) Path() string { return p.path }

// Close removes the pin, if it is still this instance's (a later agent may
// have replaced it: that one stays), and unloads the instance.
func (p *Published) Close() error {
	var err error
	if l, lerr := link.LoadPinnedLink(p.path, nil); lerr == nil {
		info, ierr := l.Info()
		if ierr == nil && info.ID == p.linkID {
			err = os.Remove(p.path)
		}
		l.Close()
	}
	return errors.Join(err, p.it.Close())
}

// Pinned is an iterator opened from a pin. It reads like an Iter; its
// known_max_id belongs to nobody, so every record is whole.
type Pinned struct {
	*Iter
	path string
}

// OpenPinned opens the iterator the agent pinned under bpffs for cpus
// possible CPUs. The error says in one line why there is none to use: no
// pin (no agent of this version runs), bpffs not mounted, the kernel
// refusing the pin, or something else pinned there.
func OpenPinned(bpffs string, cpus int) (*Pinned, error) {
	if err := checkBPFFS(bpffs); err != nil {
		return nil, err
	}
	path := PinPath(bpffs, cpus)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no iterator pinned at %s (no bpfleet agent of this version runs)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening pinned iterator %s: %w", path, err)
	}
	il, ok := l.(*link.Iter)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("%s is not an iterator link", path)
	}
	info, err := il.Info()
	if err != nil {
		il.Close()
		return nil, fmt.Errorf("reading pinned iterator %s: %w", path, err)
	}
	it := &Iter{link: il, progID: uint32(info.Program), cpus: cpus, buf: make([]byte, bufSize), names: newNames()}
	return &Pinned{Iter: it, path: path}, nil
}

// Path is the pin the iterator was opened from.
func (p *Pinned) Path() string { return p.path }

// SetKnownMaxID does nothing: the pinned instance's known_max_id is not
// this reader's to set (another reader of the same pin would get partial
// records), so every read returns whole records.
func (p *Pinned) SetKnownMaxID(uint32) error { return nil }

// Read reads every program's whole record (Iter.Read), into a slice sized
// for a node with many programs when dst has none: a one-shot reader would
// otherwise grow it by doubling, copying and faulting in ~2x its records.
func (p *Pinned) Read(dst []Record) ([]Record, error) {
	if cap(dst) == 0 {
		dst = make([]Record, 0, 1024)
	}
	return p.Iter.Read(dst)
}
