package taskfile

import (
	"encoding/binary"

	"github.com/bpfleet/bpfleet/probes/internal/iterpin"
	"github.com/bpfleet/bpfleet/probes/internal/records"
)

// The agent pins a task_file iterator for one-shot commands as it does the
// stats iterator (probes/progstats/pin.go): `bpfleet list` then finds the
// owners of every program in one read, instead of loading the iterator
// (a kernel BTF parse where its CO-RE result is not cached: tens of ms) or walking /proc/*/fdinfo. After its
// learning pass the program's state is read-only, so every reader of the
// pin sees the same. A task iterator reports pids in the pid namespace of
// the task that opens it, so a reader gets its own namespace's pids.

// PinPath is where, under the bpffs mount bpffs, this bpfleet's task_file
// iterator is pinned.
func PinPath(bpffs string) string {
	return iterpin.Path(bpffs, "taskfile", _TaskfileBytes, binary.LittleEndian.AppendUint32(nil, recordSize))
}

// Published is an iterator instance the agent has pinned for one-shot
// readers.
type Published = iterpin.Published

// Publish loads an instance of the iterator, its CO-RE result cached in
// cacheDir ("" for none), and pins it at PinPath(bpffs), replacing a pin
// already there (iterpin.Pin).
func Publish(bpffs, cacheDir string) (*Published, error) {
	path := PinPath(bpffs)
	if err := iterpin.Ready(path); err != nil {
		return nil, err
	}
	it, _, err := LoadCached(cacheDir)
	if err != nil {
		return nil, err
	}
	return iterpin.Publish(it.link, it, path)
}

// OpenPinned opens the iterator the agent pinned under bpffs; the error
// says in one line why there is none to use.
func OpenPinned(bpffs string) (*Iter, error) {
	l, _, err := iterpin.Open(bpffs, PinPath(bpffs))
	if err != nil {
		return nil, err
	}
	return &Iter{link: l, buf: make([]byte, bufSize), comms: records.NewStrings()}, nil
}
