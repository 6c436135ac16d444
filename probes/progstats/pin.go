package progstats

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/iterpin"
)

// A pinned iterator lets a one-shot command (`bpfleet list`) read every
// program's record without loading the iterator itself (the verifier run
// and map creation cost ~10 ms, more than the syscall scan it would
// replace): the long-running agent loads a second instance of the
// iterator, separate from the one it scans with, and pins its iter link in
// bpffs (probes/internal/iterpin); list opens the pin and reads.
//
// The pinned instance always returns whole records: nobody holds its
// known_max_id map (the agent's own instance sets its known_max_id every
// scan, so sharing it would hand list records without their static fields).
//
// The pin's name carries a hash of this package's BPF object and record
// size, and the possible-CPU count the instance sums over (a .rodata
// constant): a bpfleet whose object or decoder differs never opens a pin
// whose records it cannot decode; it finds no pin and falls back.

// PinPath is where, under the bpffs mount bpffs, the iterator instance for
// this bpfleet's object and cpus possible CPUs is pinned.
func PinPath(bpffs string, cpus int) string {
	return iterpin.Path(bpffs, fmt.Sprintf("progstats-%dcpu", cpus), _ProgstatsBytes, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, recordSize), statSize))
}

// Published is an iterator instance the agent has pinned for one-shot
// readers.
type Published = iterpin.Published

// Publish loads a separate instance of the iterator for cpus possible CPUs
// and pins its link at PinPath(bpffs, cpus), replacing a pin already there
// (iterpin.Pin).
func Publish(bpffs string, cpus int) (*Published, error) {
	path := PinPath(bpffs, cpus)
	if err := iterpin.Ready(path); err != nil {
		return nil, err
	}
	it, err := Load(cpus)
	if err != nil {
		return nil, err
	}
	return iterpin.Publish(it.link, it, path)
}

// Pinned is an iterator opened from a pin. It reads like an Iter; its
// known_max_id belongs to nobody, so every record is whole.
type Pinned struct {
	*Iter
	path string
}

// OpenPinned opens the iterator the agent pinned under bpffs for cpus
// possible CPUs; the error says in one line why there is none to use.
func OpenPinned(bpffs string, cpus int) (*Pinned, error) {
	path := PinPath(bpffs, cpus)
	l, info, err := iterpin.Open(bpffs, path)
	if err != nil {
		return nil, err
	}
	it := &Iter{link: l, progID: uint32(info.Program), cpus: cpus, buf: make([]byte, bufSize), names: newNames()}
	return &Pinned{Iter: it, path: path}, nil
}

// Path is the pin the iterator was opened from.
func (p *Pinned) Path() string { return p.path }

// SetKnownMaxID does nothing: the pinned instance's known_max_id is not
// this reader's to set (another reader of the same pin would get partial
// records), so every read returns whole records.
func (p *Pinned) SetKnownMaxID(uint32) error { return nil }

// ReadStats is Iter.ReadStats (every record whole: see SetKnownMaxID),
// into slices sized for a node with many programs when the caller has none:
// a one-shot reader would otherwise grow them by doubling, copying and
// faulting in ~2x its records.
func (p *Pinned) ReadStats(stats []Stat, whole []Record) ([]Stat, []Record, error) {
	if cap(stats) == 0 {
		stats = make([]Stat, 0, 1024)
	}
	if cap(whole) == 0 {
		whole = make([]Record, 0, 1024)
	}
	return p.Iter.ReadStats(stats, whole)
}
