// Package taskfile finds, in one pass of a BPF iterator over every open
// file of every process, which processes hold BPF program and link fds, and
// perf_event fds that carry a program: the owners of the programs on a
// node, as bpftool's pid_iter does, without reading /proc/*/fdinfo/* file
// by file.
package taskfile

import (
	"encoding/binary"
	"fmt"

	"github.com/bpfleet/bpfleet/probes/internal/coreload"
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
	prog   *ebpf.Program
	progID uint32
	maps   map[string]*ebpf.Map
	vars   map[string]*ebpf.VariableSpec
	link   *link.Iter
	buf    []byte
	// comms interns process names: a node has few distinct ones, so
	// steady-state reads allocate no strings.
	comms records.Strings
}

// LoadInfo says how a load went, for callers that report or measure it.
type LoadInfo = coreload.LoadInfo

// The iterator is loaded with bpf(BPF_PROG_LOAD) directly, its CO-RE result
// cached per kernel build (probes/internal/coreload), as the stats
// iterators are: cilium/ebpf's loader parses the whole vmlinux BTF on every
// load, ~30 ms, three times what a /proc walk of 1,000 held program fds
// costs, so a one-shot list could only afford the iterator from the cache.

// LoadCached loads the iterator and attaches it, its CO-RE result cached
// in dir ("" for no cache: relocated from kernel BTF). When the kernel
// refuses it the error wraps ebpf.ErrNotSupported and says why; missing
// privileges are reported as the kernel's EPERM.
func LoadCached(dir string) (*Iter, LoadInfo, error) { return load(false, dir) }

// object is the iterator's CO-RE identity (probes/internal/coreload).
var object = coreload.Object{Name: "taskfile", Bytes: _TaskfileBytes, Spec: loadTaskfile, Prog: "dump_task_file", Target: "task_file"}

// Cached says whether dir holds the CO-RE result for the running kernel,
// so that LoadCached would skip kernel BTF.
func Cached(dir string) bool { return object.Cached(dir) }

// WarmCache is LoadCached's cache file written without a load: a one-shot
// list then takes owners from the iterator rather than the /proc walk.
func WarmCache(dir string) error { return object.Warm(dir) }

// load with the test switch that finds links by name (see taskfile.bpf.c).
func load(linksByName bool, dir string) (*Iter, LoadInfo, error) {
	spec, p, err := object.Program()
	if err != nil {
		return nil, LoadInfo{}, err
	}
	var vars map[string]uint32
	if linksByName {
		vars = map[string]uint32{"links_by_name": 1}
	}
	return coreload.Load(p, dir, func(c *coreload.Result) (*Iter, error) {
		prog, maps, err := coreload.Instantiate(spec, "dump_task_file", c, vars)
		if err != nil {
			return nil, fmt.Errorf("loading iter/task_file: %w", refuse.Iterator(err, "task_file"))
		}
		it := &Iter{prog: prog, maps: maps, vars: spec.Variables, buf: make([]byte, bufSize), comms: records.NewStrings()}
		if it.link, it.progID, err = coreload.Attach(prog, "task_file"); err != nil {
			it.Close()
			return nil, err
		}
		if err := it.learn(); err != nil {
			it.Close()
			return nil, err
		}
		return it, nil
	})
}

// learn runs one pass in which the program notes the file operations of
// this process's own program and link fds (the iterator's): how it tells
// BPF files from others in every later pass.
func (it *Iter) learn() error {
	le := binary.LittleEndian
	for _, set := range []struct {
		name string
		val  []byte
	}{
		{"learn_prog_fd", le.AppendUint32(nil, uint32(it.prog.FD()))},
		{"learn_link_fd", le.AppendUint32(nil, uint32(it.link.FD()))},
		{"learning", []byte{1}},
	} {
		if err := it.setVar(set.name, set.val); err != nil {
			return fmt.Errorf("arming task_file iterator: %w", err)
		}
	}
	if err := it.Read(func(Entry) {}); err != nil {
		return err
	}
	if err := it.setVar("learning", []byte{0}); err != nil {
		return fmt.Errorf("arming task_file iterator: %w", err)
	}
	var fops [2]uint64
	for i, name := range []string{"learned_prog_fops", "learned_link_fops"} {
		b, err := it.getVar(name)
		if err != nil {
			return fmt.Errorf("reading task_file iterator state: %w", err)
		}
		fops[i] = le.Uint64(b)
	}
	if fops[0] == 0 || fops[1] == 0 {
		return fmt.Errorf("%w: cannot recognise bpf files: the iterator did not see this process's own program and link fds", ebpf.ErrNotSupported)
	}
	return nil
}

// section returns the map holding a global variable and its spec. The
// maps are made without BTF (coreload), so variables are read and written
// as bytes of the section's one value.
func (it *Iter) section(name string) (*ebpf.Map, *ebpf.VariableSpec, []byte, error) {
	v := it.vars[name]
	if v == nil {
		return nil, nil, nil, fmt.Errorf("no variable %s in the object", name)
	}
	m := it.maps[v.SectionName]
	if m == nil {
		return nil, nil, nil, fmt.Errorf("no map for section %s of %s", v.SectionName, name)
	}
	val := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), &val); err != nil {
		return nil, nil, nil, fmt.Errorf("reading %s: %w", v.SectionName, err)
	}
	if int(v.Offset+v.Size()) > len(val) {
		return nil, nil, nil, fmt.Errorf("variable %s outside %s", name, v.SectionName)
	}
	return m, v, val, nil
}

func (it *Iter) setVar(name string, b []byte) error {
	m, v, val, err := it.section(name)
	if err != nil {
		return err
	}
	if len(b) != int(v.Size()) {
		return fmt.Errorf("variable %s is %d bytes, not %d", name, v.Size(), len(b))
	}
	copy(val[v.Offset:], b)
	return m.Update(uint32(0), val, ebpf.UpdateAny)
}

func (it *Iter) getVar(name string) ([]byte, error) {
	_, v, val, err := it.section(name)
	if err != nil {
		return nil, err
	}
	return val[v.Offset : v.Offset+v.Size()], nil
}

// ProgramID is the id of the iterator program this process loaded, so a
// caller listing programs can recognise its own; 0 for a pinned one.
func (it *Iter) ProgramID() uint32 { return it.progID }

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
	return coreload.Close(it.link, it.prog, it.maps)
}
