// Package taskfile finds, in one pass of a BPF iterator over every open
// file of every process, which processes hold BPF program and link fds, and
// perf_event fds that carry a program: the owners of the programs on a
// node, as bpftool's pid_iter does, without reading /proc/*/fdinfo/* file
// by file.
package taskfile

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/records"
	"github.com/bpfleet/bpfleet/probes/internal/refuse"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Kind is what a BPF file is.
type Kind uint8

const (
	KindProg Kind = 1 // a program fd (bpf-prog)
	KindLink Kind = 2 // a link fd (bpf_link)
	// KindPerf is a perf_event fd ([perf_event]) carrying a program: a
	// kprobe, uprobe or tracepoint attached with PERF_EVENT_IOC_SET_BPF,
	// alone before Linux 5.15, beside its perf_event link after. What it
	// is attached to is BPF_TASK_FD_QUERY's to say (internal/bpfsys).
	KindPerf Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindProg:
		return "prog"
	case KindLink:
		return "link"
	case KindPerf:
		return "perf_event"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Entry is one BPF file held open by a process.
type Entry struct {
	PID    uint32 // thread group id, in the initial pid namespace
	FD     uint32
	Kind   Kind
	ProgID uint32 // the program, or the program of the link or perf event
	LinkID uint32 // 0 but for a link fd
	Comm   string
}

// Layout of struct file_record in taskfile.bpf.c.
const (
	recordSize = 40
	commOff    = 24
	commLen    = 16
)

const bufSize = 64 << 10

// Iter is a loaded and attached task_file iterator. It is not safe for
// concurrent use.
type Iter struct {
	objs taskfileObjects
	link *link.Iter
	buf  []byte
	// comms interns process names: a node has few distinct ones, so
	// steady-state reads allocate no strings.
	comms records.Strings
}

// Load loads the iterator and attaches it. When the kernel refuses it the
// error wraps ebpf.ErrNotSupported and says why; missing privileges are
// reported as the kernel's EPERM.
func Load() (*Iter, error) { return load(false) }

// load with the test switch that finds links by name (see taskfile.bpf.c).
func load(linksByName bool) (*Iter, error) {
	spec, err := loadTaskfile()
	if err != nil {
		return nil, fmt.Errorf("reading task_file iterator spec: %w", err)
	}
	if err := spec.Variables["links_by_name"].Set(linksByName); err != nil {
		return nil, fmt.Errorf("configuring task_file iterator: %w", err)
	}
	it := &Iter{buf: make([]byte, bufSize), comms: records.NewStrings()}
	if err := spec.LoadAndAssign(&it.objs, nil); err != nil {
		return nil, fmt.Errorf("loading iter/task_file: %w", refuse.Iterator(err, "task_file"))
	}
	it.link, err = link.AttachIter(link.IterOptions{Program: it.objs.DumpTaskFile})
	if err != nil {
		it.objs.Close()
		return nil, fmt.Errorf("attaching iter/task_file: %w", refuse.Iterator(err, "task_file"))
	}
	if err := it.learn(); err != nil {
		it.Close()
		return nil, err
	}
	return it, nil
}

// learn runs one pass in which the program notes the file operations of
// this process's own program and link fds (the iterator's): how it tells
// BPF files from others in every later pass.
func (it *Iter) learn() error {
	v := it.objs.taskfileVariables
	for _, set := range []struct {
		v   *ebpf.Variable
		val any
	}{
		{v.LearnProgFd, int32(it.objs.DumpTaskFile.FD())},
		{v.LearnLinkFd, int32(it.link.FD())},
		{v.Learning, true},
	} {
		if err := set.v.Set(set.val); err != nil {
			return fmt.Errorf("arming task_file iterator: %w", err)
		}
	}
	if err := it.Read(func(Entry) {}); err != nil {
		return err
	}
	if err := v.Learning.Set(false); err != nil {
		return fmt.Errorf("arming task_file iterator: %w", err)
	}
	var progFops, linkFops uint64
	for _, get := range []struct {
		v   *ebpf.Variable
		dst any
	}{{v.LearnedProgFops, &progFops}, {v.LearnedLinkFops, &linkFops}} {
		if err := get.v.Get(get.dst); err != nil {
			return fmt.Errorf("reading task_file iterator state: %w", err)
		}
	}
	if progFops == 0 || linkFops == 0 {
		return fmt.Errorf("%w: cannot recognise bpf files: the iterator did not see this process's own program and link fds", ebpf.ErrNotSupported)
	}
	return nil
}

// Read runs one pass of the iterator and calls fn for every BPF program or
// link fd, and every perf_event fd with a program, open in any process. Each process is visited once, not once per
// thread. The Entry is passed by value; fn may keep it.
func (it *Iter) Read(fn func(Entry)) error {
	rd, err := it.link.Open()
	if err != nil {
		return fmt.Errorf("opening task_file iterator: %w", err)
	}
	defer rd.Close()

	if err := records.Read(rd, it.buf, recordSize, func(b []byte) { fn(it.decode(b)) }); err != nil {
		return fmt.Errorf("reading task_file iterator: %w", err)
	}
	return nil
}

func (it *Iter) decode(b []byte) Entry {
	le := binary.LittleEndian // both targets (amd64, arm64) are little-endian
	e := Entry{
		PID:    le.Uint32(b[0:]),
		FD:     le.Uint32(b[4:]),
		Kind:   Kind(le.Uint32(b[8:])),
		ProgID: le.Uint32(b[12:]),
		LinkID: le.Uint32(b[16:]),
	}
	e.Comm = it.comms.Get(b[commOff : commOff+commLen])
	return e
}

// Close detaches and unloads the iterator.
func (it *Iter) Close() error {
	return errors.Join(it.link.Close(), it.objs.Close())
}
