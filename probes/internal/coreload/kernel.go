package coreload

// What goes to the kernel once the instructions are patched: the program
// load, its maps, and their teardown.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/probes/internal/refuse"
)

// Constants of BPF_PROG_LOAD (include/uapi/linux/bpf.h).
const (
	progTypeTracing     = 26 // BPF_PROG_TYPE_TRACING
	attachTraceIter     = 28 // BPF_TRACE_ITER
	errnoENOTSUPP       = 524
	verifierLogSize     = 1 << 20
	verifierLogTailRows = 3
)

// ProgLoad loads an iterator program (marshalled instructions) named name;
// on a verifier refusal it loads again with a log and returns the log's
// last lines, which name what this kernel lacks (an unknown helper, a
// refused access).
func ProgLoad(insns []byte, attachBTFID uint32, name string) (int, error) {
	license := []byte("GPL\x00")
	attr := bpfsys.ProgLoadAttr{
		ProgType:           progTypeTracing,
		InsnCnt:            uint32(len(insns) / asm.InstructionSize),
		Insns:              uint64(uintptr(unsafe.Pointer(&insns[0]))),
		License:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		ExpectedAttachType: attachTraceIter,
		AttachBTFID:        attachBTFID,
	}
	copy(attr.ProgName[:15], name)
	fd, err := bpfsys.ProgLoad(&attr)
	if err == nil {
		runtime.KeepAlive(insns)
		return fd, nil
	}
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINVAL) {
		if errors.Is(err, unix.Errno(errnoENOTSUPP)) || errors.Is(err, unix.EOPNOTSUPP) {
			return -1, fmt.Errorf("%w: %w", ebpf.ErrNotSupported, err)
		}
		return -1, err
	}
	log := make([]byte, verifierLogSize)
	attr.LogLevel, attr.LogSize, attr.LogBuf = 1, uint32(len(log)), uint64(uintptr(unsafe.Pointer(&log[0])))
	if fd, err2 := bpfsys.ProgLoad(&attr); err2 == nil {
		unix.Close(fd) // loads with a log but not without: keep the first error
	}
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	lines := strings.Split(strings.TrimRight(unix.ByteSliceToString(log), "\n"), "\n")
	tail := strings.Join(lines[max(0, len(lines)-verifierLogTailRows):], " | ")
	return -1, fmt.Errorf("%w: verifier rejected the iterator: %w: %s", ebpf.ErrNotSupported, err, tail)
}

// Instantiate creates every map of spec (without key/value BTF: none of
// the iterators' maps needs it, and each type would cost a BTF_LOAD), with
// the named 32-bit .rodata variables set, loads program prog patched by c
// and returns it with its maps by name. On error nothing is left open.
func Instantiate(spec *ebpf.CollectionSpec, prog string, c *Result, vars map[string]uint32) (_ *ebpf.Program, _ map[string]*ebpf.Map, err error) {
	ps := spec.Programs[prog]
	if ps == nil {
		return nil, nil, fmt.Errorf("no program %s in the object", prog)
	}
	insns := ps.Copy().Instructions
	if err := c.Apply(insns); err != nil {
		return nil, nil, err
	}
	maps := map[string]*ebpf.Map{}
	defer func() {
		if err != nil {
			for _, m := range maps {
				m.Close()
			}
		}
	}()
	for name, ms := range spec.Maps {
		ms = ms.Copy()
		if name == ".rodata" {
			if err := setVars(spec, ms, vars); err != nil {
				return nil, nil, err
			}
		}
		ms.Key, ms.Value = nil, nil
		m, err := ebpf.NewMap(ms)
		if err != nil {
			return nil, nil, fmt.Errorf("creating map %s: %w", name, err)
		}
		maps[name] = m
		if err := insns.AssociateMap(name, m); err != nil && !errors.Is(err, asm.ErrUnreferencedSymbol) {
			return nil, nil, fmt.Errorf("map %s: %w", name, err)
		}
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return nil, nil, fmt.Errorf("marshaling iterator: %w", err)
	}
	fd, err := ProgLoad(buf.Bytes(), c.AttachBTFID, prog)
	if err != nil {
		return nil, nil, fmt.Errorf("loading iter/%s: %w", strings.TrimPrefix(ps.AttachTo, "bpf_"), err)
	}
	p, err := ebpf.NewProgramFromFD(fd)
	if err != nil {
		// fd is closed already: NewProgramFromFD owns it, failed or not
		// (closing it again could close another object's fd by its number).
		return nil, nil, fmt.Errorf("wrapping iterator program: %w", err)
	}
	return p, maps, nil
}

// Attach attaches prog, an iterator program made by Instantiate for target
// ("bpf_prog", "bpf_link", ...), and asks the kernel for its id. A refusal
// wraps ebpf.ErrNotSupported and says why (refuse.Iterator).
func Attach(prog *ebpf.Program, target string) (*link.Iter, uint32, error) {
	l, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return nil, 0, fmt.Errorf("attaching iter/%s: %w", target, refuse.Iterator(err, target))
	}
	id, err := ProgramID(prog)
	if err != nil {
		l.Close()
		return nil, 0, err
	}
	return l, id, nil
}

// KnownMaxID is an iterator's known_max_id map: the highest id whose
// unchanging fields the caller holds, so that the program sends only what
// changes for those. Ids only grow (until they wrap after 2^31), so one
// number says it.
type KnownMaxID struct {
	m    *ebpf.Map
	id   uint32
	what string // "program", "link", "map": for the error
}

// NewKnownMaxID is the known_max_id map of maps (Instantiate's), for
// objects named what.
func NewKnownMaxID(maps map[string]*ebpf.Map, what string) KnownMaxID {
	return KnownMaxID{m: maps["known_max_id"], what: what}
}

// Set writes id to the map, which is written only when it changed.
func (k *KnownMaxID) Set(id uint32) error {
	if id == k.id {
		return nil
	}
	if err := k.m.Put(uint32(0), id); err != nil {
		return fmt.Errorf("setting known %s id: %w", k.what, err)
	}
	k.id = id
	return nil
}

// ProgramID is the kernel's id of an iterator program this process loaded,
// so that a caller listing programs can recognise its own.
func ProgramID(p *ebpf.Program) (uint32, error) {
	info, err := p.Info()
	if err != nil {
		return 0, fmt.Errorf("reading iterator program info: %w", err)
	}
	id, _ := info.ID()
	return uint32(id), nil
}

// Close detaches and unloads an iterator made by Instantiate and attached
// as l; any of them may be nil (a load that failed half-way).
func Close(l *link.Iter, p *ebpf.Program, maps map[string]*ebpf.Map) error {
	var errs []error
	if l != nil {
		errs = append(errs, l.Close())
	}
	if p != nil {
		errs = append(errs, p.Close())
	}
	for _, m := range maps {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// setVars writes values into a copy of the .rodata map's contents, each
// little-endian in its variable's size (a bool, an int: up to 32 bits).
func setVars(spec *ebpf.CollectionSpec, rodata *ebpf.MapSpec, vars map[string]uint32) error {
	if len(vars) == 0 {
		return nil
	}
	data, ok := rodata.Contents[0].Value.([]byte)
	if !ok {
		return errors.New("unexpected .rodata layout")
	}
	data = bytes.Clone(data)
	for name, val := range vars {
		v := spec.Variables[name]
		if v == nil || v.SectionName != ".rodata" || v.Size() > 4 || int(v.Offset+v.Size()) > len(data) {
			return fmt.Errorf("no .rodata variable %s of up to 32 bits", name)
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], val)
		copy(data[v.Offset:v.Offset+v.Size()], b[:])
	}
	rodata.Contents[0].Value = data
	return nil
}
