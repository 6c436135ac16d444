// Package iterpin pins the iterator links the long-running agent shares
// with one-shot commands (`bpfleet list`) in bpffs, and opens them: a
// command that opens a pin (BPF_OBJ_GET) and creates an iterator from it
// (BPF_ITER_CREATE) pays no BTF parse, no verifier run and no map creation.
package iterpin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Dir is the directory, under a bpffs mount, that holds bpfleet's pins.
const Dir = "bpfleet"

// bpffsMagic is BPF_FS_MAGIC (include/uapi/linux/magic.h).
const bpffsMagic = 0xcafe4a11

// Path is where, under the bpffs mount bpffs, the iterator named name
// built from object (its BPF object and anything else its records'
// decoding depends on) is pinned: a bpfleet whose object differs never
// opens a pin whose records it cannot decode.
func Path(bpffs, name string, object ...[]byte) string {
	h := sha256.New()
	for _, b := range object {
		h.Write(b)
	}
	return filepath.Join(bpffs, Dir, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
}

// CheckBPFFS says whether dir is on a bpffs mount, in one line if not.
func CheckBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("bpffs %s: %w", dir, err)
	}
	if uint32(st.Type) != bpffsMagic {
		return fmt.Errorf("%s is not a bpffs mount (mount -t bpf bpf %s)", dir, dir)
	}
	return nil
}

// Ready says whether path can take a pin: its bpffs is mounted and its
// directory exists (made if not) and is writable. Publishers ask it before
// loading what they would pin, so a read-only bpffs (the chart's default
// mount) costs no iterator load.
func Ready(path string) error {
	dir := filepath.Dir(path)
	if err := CheckBPFFS(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating pin directory: %w", err)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("pin directory %s is not writable: %w", dir, err)
	}
	return nil
}

// Pin pins l at path, replacing a pin already there (one left by an agent
// that did not exit cleanly, or another agent's on this node: either reads
// the same). The replacement is atomic (a pin under a temporary name, then
// a rename), so a reader never finds the path empty while an agent starts.
// It returns the link's id, for Unpin.
func Pin(l *link.Iter, path string) (link.ID, error) {
	info, err := l.Info()
	if err != nil {
		return 0, fmt.Errorf("reading iterator link info: %w", err)
	}
	if err := Ready(path); err != nil {
		return 0, err
	}
	// bpffs refuses names with a dot (EPERM: reserved for the kernel).
	tmp := fmt.Sprintf("%s-tmp%d", path, os.Getpid())
	os.Remove(tmp)
	if err := l.Pin(tmp); err != nil {
		return 0, fmt.Errorf("pinning iterator link at %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Unpin()
		return 0, fmt.Errorf("pinning iterator link at %s: %w", path, err)
	}
	return info.ID, nil
}

// Unpin removes the pin at path if it still holds link id (a later agent
// may have replaced it: that one stays).
func Unpin(path string, id link.ID) error {
	l, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return nil // gone already, or not ours to judge
	}
	defer l.Close()
	if info, err := l.Info(); err == nil && info.ID == id {
		return os.Remove(path)
	}
	return nil
}

// Open opens the iterator link pinned at path under the bpffs mount bpffs.
// The error says in one line why there is none to use: no pin (no agent of
// this version runs), bpffs not mounted, the kernel refusing the pin, or
// something else pinned there. The kernel opens a link pin read-write only
// (BPF_OBJ_GET with BPF_F_RDONLY is EINVAL for links).
func Open(bpffs, path string) (*link.Iter, link.Info, error) {
	if err := CheckBPFFS(bpffs); err != nil {
		return nil, link.Info{}, err
	}
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, link.Info{}, fmt.Errorf("no iterator pinned at %s (no bpfleet agent of this version runs)", path)
	}
	if err != nil {
		return nil, link.Info{}, fmt.Errorf("opening pinned iterator %s: %w", path, err)
	}
	il, ok := l.(*link.Iter)
	if !ok {
		l.Close()
		return nil, link.Info{}, fmt.Errorf("%s is not an iterator link", path)
	}
	info, err := il.Info()
	if err != nil {
		il.Close()
		return nil, link.Info{}, fmt.Errorf("reading pinned iterator %s: %w", path, err)
	}
	return il, *info, nil
}

// Published is an iterator instance pinned for one-shot readers: closing
// it removes the pin if it is still this instance's, then unloads the
// instance.
type Published struct {
	inst   io.Closer
	path   string
	linkID link.ID
}

// Publish pins l, an iterator link of inst, at path (Pin). On failure it
// closes inst.
func Publish(l *link.Iter, inst io.Closer, path string) (*Published, error) {
	id, err := Pin(l, path)
	if err != nil {
		inst.Close()
		return nil, err
	}
	return &Published{inst: inst, path: path, linkID: id}, nil
}

// Path is where the instance is pinned.
func (p *Published) Path() string { return p.path }

// Close removes the pin if it is still this instance's, and unloads it.
func (p *Published) Close() error {
	return errors.Join(Unpin(p.path, p.linkID), p.inst.Close())
}

// LinkID is the id of the pinned link.
func (p *Published) LinkID() link.ID { return p.linkID }
