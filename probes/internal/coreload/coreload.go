// Package coreload loads the iterator programs of probes/ (progstats,
// linkstats, mapstats) with bpf(BPF_PROG_LOAD) directly rather than through
// cilium/ebpf's loader: that one parses the whole vmlinux BTF for every
// load (to relocate CO-RE reads and find the iterator's attach target),
// 20–45 ms of a one-shot `bpfleet list` whose scan itself takes under a
// millisecond. Here the CO-RE result (the patched instructions, the attach
// BTF id and any kernel enum values the program needs) is computed from
// vmlinux BTF once per kernel build and kept in a cache file keyed by the
// kernel's identity; later loads only patch the instructions, create the
// program's maps and run the verifier. A program may call kfuncs declared
// __ksym __weak (Program.Kfuncs): their vmlinux BTF ids are part of the
// cached result, and a kfunc the kernel lacks becomes a call the
// verifier drops behind bpf_ksym_exists().
package coreload

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Program describes one iterator program to relocate and load.
type Program struct {
	// Name is the cache file's prefix and the program's name in the kernel.
	Name string
	// Object is the program's ELF object (part of the cache key: a new
	// bpfleet with another program makes another key).
	Object []byte
	// Insns are the program's instructions, with their CO-RE metadata.
	Insns asm.Instructions
	// Target is the iterator target ("bpf_prog", "bpf_link"): the attach
	// BTF id is that of bpf_iter_<Target>.
	Target string
	// Enums names kernel enumerators whose values the program needs and
	// CO-RE cannot give it (members of anonymous enums, such as
	// TRACE_EVENT_FL_KPROBE); Result.Enums holds their values, absent
	// where the kernel has no such enumerator.
	Enums []string
	// Kfuncs names the kernel functions the program calls (declared
	// __ksym __weak and guarded with bpf_ksym_exists()); Result.Kfuncs
	// holds their vmlinux BTF ids, 0 where the kernel has no such kfunc.
	Kfuncs []string
}

// Result is what CO-RE against one kernel's BTF gave: the cache file.
type Result struct {
	Key         string           `json:"key"`
	AttachBTFID uint32           `json:"attach_btf_id"`
	Patches     []Patch          `json:"patches"`
	Enums       map[string]int64 `json:"enums,omitempty"`
	// Kfuncs maps each of Program.Kfuncs to its vmlinux BTF id, 0 when
	// the kernel lacks it.
	Kfuncs map[string]uint32 `json:"kfuncs,omitempty"`
}

// Patch is one relocated instruction, by its index in the program.
type Patch struct {
	Index    int   `json:"i"`
	OpCode   uint8 `json:"op"`
	Dst      uint8 `json:"dst"`
	Src      uint8 `json:"src"`
	Offset   int16 `json:"off"`
	Constant int64 `json:"imm"`
}

// LoadInfo says how a load went, for callers that report or measure it.
type LoadInfo struct {
	// Cached is true when the CO-RE result came from the cache file.
	Cached bool
	// CachePath is the cache file used or written, "" when none.
	CachePath string
	// CacheErr says why the cache could not be read or written (the load
	// itself still succeeded), nil otherwise.
	CacheErr error
}

// KernelKey identifies the running kernel's BTF together with a program's
// object: the build id note (/sys/kernel/notes), uname and the size of
// /sys/kernel/btf/vmlinux. A new kernel build, or a new bpfleet with
// another program, makes another key.
func KernelKey(object []byte) (string, error) {
	h := sha256.New()
	h.Write(object)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	h.Write(u.Release[:])
	h.Write(u.Version[:])
	h.Write(u.Machine[:])
	notes, err := os.ReadFile("/sys/kernel/notes")
	if err != nil {
		return "", fmt.Errorf("reading kernel build id: %w", err)
	}
	h.Write(notes)
	fi, err := os.Stat("/sys/kernel/btf/vmlinux")
	if err != nil {
		return "", fmt.Errorf("%w: kernel has no BTF: %w", ebpf.ErrNotSupported, err)
	}
	fmt.Fprintf(h, "%d", fi.Size())
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Relocate computes the CO-RE patches, the attach target id and the enum
// values from the kernel's BTF: the expensive step the cache saves.
func Relocate(p *Program, key string) (*Result, error) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: loading kernel BTF: %w", ebpf.ErrNotSupported, err)
	}
	var fn *btf.Func
	if err := kernel.TypeByName("bpf_iter_"+p.Target, &fn); err != nil {
		return nil, fmt.Errorf("%w: kernel BTF has no %s iterator target: %w", ebpf.ErrNotSupported, p.Target, err)
	}
	attachID, err := kernel.TypeID(fn)
	if err != nil {
		return nil, err
	}
	var relos []*btf.CORERelocation
	var at []int
	for i := range p.Insns {
		if r := btf.CORERelocationMetadata(&p.Insns[i]); r != nil {
			relos = append(relos, r)
			at = append(at, i)
		}
	}
	noLocalIDs := func(btf.Type) (btf.TypeID, error) { return 0, errors.New("no local type ids in this program") }
	fixups, err := btf.CORERelocate(relos, []*btf.Spec{kernel}, binary.LittleEndian, noLocalIDs)
	if err != nil {
		return nil, fmt.Errorf("%w: CO-RE against kernel BTF: %w", ebpf.ErrNotSupported, err)
	}
	c := &Result{Key: key, AttachBTFID: uint32(attachID)}
	for j, f := range fixups {
		ins := p.Insns[at[j]]
		if err := f.Apply(&ins); err != nil {
			return nil, fmt.Errorf("%w: applying CO-RE fixup %d: %w", ebpf.ErrNotSupported, j, err)
		}
		c.Patches = append(c.Patches, Patch{Index: at[j], OpCode: uint8(ins.OpCode), Dst: uint8(ins.Dst), Src: uint8(ins.Src), Offset: ins.Offset, Constant: ins.Constant})
	}
	if len(p.Enums) > 0 {
		c.Enums = enumValues(p.Enums)
	}
	if len(p.Kfuncs) > 0 {
		c.Kfuncs = map[string]uint32{}
		for _, name := range p.Kfuncs {
			var fn *btf.Func
			switch err := kernel.TypeByName(name, &fn); {
			case errors.Is(err, btf.ErrNotFound):
				c.Kfuncs[name] = 0
			case err != nil:
				return nil, fmt.Errorf("looking up kfunc %s: %w", name, err)
			default:
				id, err := kernel.TypeID(fn)
				if err != nil {
					return nil, err
				}
				c.Kfuncs[name] = uint32(id)
			}
		}
	}
	return c, nil
}

// enumValues finds the named enumerators in the kernel's enums. They sit in
// anonymous enums, which no lookup by name reaches, and decoding every
// type of vmlinux BTF to find them costs ~200 ms: the raw BTF is scanned
// instead (a few ms), matching enumerators by name offset.
func enumValues(names []string) map[string]int64 {
	out := map[string]int64{}
	raw, err := os.ReadFile("/sys/kernel/btf/vmlinux")
	if err != nil {
		return out
	}
	vals, err := scanEnums(raw, names)
	if err != nil {
		return out
	}
	return vals
}

// BTF kinds (include/uapi/linux/btf.h) and what follows each type record.
const (
	btfKindInt      = 1
	btfKindArray    = 3
	btfKindStruct   = 4
	btfKindUnion    = 5
	btfKindEnum     = 6
	btfKindFuncPro  = 13
	btfKindVar      = 14
	btfKindDatasec  = 15
	btfKindDeclTag  = 17
	btfKindEnum64   = 19
	btfTypeRecord   = 12
	btfHeaderMinLen = 24
)

// scanEnums walks raw BTF (the kernel's, little-endian on every bpfleet
// target) for enumerators named in names and returns their values; the
// first of a name wins.
func scanEnums(raw []byte, names []string) (map[string]int64, error) {
	le := binary.LittleEndian
	if len(raw) < btfHeaderMinLen || le.Uint16(raw) != 0xeB9F {
		return nil, errors.New("not little-endian BTF")
	}
	hdrLen := le.Uint32(raw[4:])
	typeOff, typeLen := le.Uint32(raw[8:]), le.Uint32(raw[12:])
	strOff, strLen := le.Uint32(raw[16:]), le.Uint32(raw[20:])
	if uint64(hdrLen)+uint64(typeOff)+uint64(typeLen) > uint64(len(raw)) || uint64(hdrLen)+uint64(strOff)+uint64(strLen) > uint64(len(raw)) {
		return nil, errors.New("BTF sections out of range")
	}
	types := raw[hdrLen+typeOff : hdrLen+typeOff+typeLen]
	strs := raw[hdrLen+strOff : hdrLen+strOff+strLen]
	want := map[uint32]string{}
	for _, n := range names {
		needle := append(append([]byte{0}, n...), 0)
		if i := bytes.Index(strs, needle); i >= 0 {
			want[uint32(i+1)] = n
		}
	}
	out := map[string]int64{}
	for off := 0; off+btfTypeRecord <= len(types) && len(out) < len(want); {
		info := le.Uint32(types[off+4:])
		kind, vlen := (info>>24)&0x1f, int(info&0xffff)
		off += btfTypeRecord
		var extra int
		switch kind {
		case btfKindInt, btfKindVar, btfKindDeclTag:
			extra = 4
		case btfKindArray:
			extra = 12
		case btfKindStruct, btfKindUnion, btfKindDatasec, btfKindEnum64:
			extra = 12 * vlen
		case btfKindEnum, btfKindFuncPro:
			extra = 8 * vlen
		}
		if off+extra > len(types) {
			return nil, errors.New("BTF type data out of range")
		}
		if kind == btfKindEnum || kind == btfKindEnum64 {
			size := 8
			if kind == btfKindEnum64 {
				size = 12
			}
			for m := off; m < off+extra; m += size {
				name, ok := want[le.Uint32(types[m:])]
				if _, dup := out[name]; !ok || dup {
					continue
				}
				v := int64(le.Uint32(types[m+4:]))
				if info>>31 != 0 { // kind_flag: a signed enum
					v = int64(int32(le.Uint32(types[m+4:])))
				}
				if kind == btfKindEnum64 {
					v = int64(uint64(le.Uint32(types[m+4:])) | uint64(le.Uint32(types[m+8:]))<<32)
				}
				out[name] = v
			}
		}
		off += extra
	}
	return out, nil
}

// Apply writes the patches into insns, after checking they are for this
// program: exactly its CO-RE instructions, no more and no less.
func (c *Result) Apply(insns asm.Instructions) error {
	n := 0
	for i := range insns {
		if btf.CORERelocationMetadata(&insns[i]) != nil {
			if n >= len(c.Patches) || c.Patches[n].Index != i {
				return fmt.Errorf("cached CO-RE patches do not match the program at instruction %d", i)
			}
			n++
		}
	}
	if n != len(c.Patches) {
		return fmt.Errorf("cached CO-RE patches: %d for %d relocations", len(c.Patches), n)
	}
	for _, p := range c.Patches {
		ins := &insns[p.Index]
		ins.OpCode, ins.Dst, ins.Src, ins.Offset, ins.Constant = asm.OpCode(p.OpCode), asm.Register(p.Dst), asm.Register(p.Src), p.Offset, p.Constant
	}
	return c.applyKfuncs(insns)
}

// kfuncPoison is the helper number a call to a kfunc the kernel lacks is
// turned into, as cilium/ebpf and libbpf do: no helper has it, so a
// program that reached the call would be refused; bpf_ksym_exists() makes
// the call dead code the verifier never checks.
const kfuncPoison = 0xdedc0de

// applyKfuncs resolves the program's kfunc references: a call gets the
// kfunc's vmlinux BTF id (offset 0: vmlinux, no fd array), or the poison
// helper where the kernel lacks it; the 64-bit load bpf_ksym_exists()
// compiles to becomes a constant, the BTF id or 0. That constant is not
// the function's address (no program here uses it as one), only what
// makes the verifier keep or drop the guarded call.
func (c *Result) applyKfuncs(insns asm.Instructions) error {
	for i := range insns {
		ins := &insns[i]
		call := ins.IsKfuncCall()
		ref := ins.Reference()
		if !call && (ref == "" || !ins.OpCode.IsDWordLoad()) {
			continue
		}
		id, ok := c.Kfuncs[ref]
		if !ok {
			if call {
				return fmt.Errorf("kfunc call %q at instruction %d not resolved", ref, i)
			}
			continue // a map or another symbol, not a kfunc
		}
		switch {
		case call && id != 0:
			ins.Constant, ins.Offset = int64(id), 0
		case call:
			*ins = asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Constant: kfuncPoison}
		default:
			ins.Src, ins.Constant = 0, int64(id)
		}
	}
	return nil
}

// ReadCache reads a cache file, which must be for key.
func ReadCache(path, key string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Result
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	if c.Key != key {
		return nil, fmt.Errorf("cache %s is for another kernel", path)
	}
	return &c, nil
}

// WriteCache writes a cache file atomically.
func WriteCache(path string, c *Result) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".core-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path) // atomic: a reader sees the old file or the whole new one
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// CachePath is p's cache file for key in dir.
func CachePath(dir string, p *Program, key string) string {
	return filepath.Join(dir, p.Name+"-"+key[:32]+".json")
}

// Cached says whether dir holds a cached result of p (only its Name and
// Object are read) for the running kernel: a load that would skip kernel
// BTF.
func Cached(p *Program, dir string) bool {
	if dir == "" {
		return false
	}
	key, err := KernelKey(p.Object)
	if err != nil {
		return false
	}
	_, err = ReadCache(CachePath(dir, p, key), key)
	return err == nil
}

// Load relocates p against the running kernel, with the result cached in
// dir ("" for no cache; internal/config chooses it, probes read no
// environment), and calls load with it. A cached result that load
// refuses is dropped and p relocated again from kernel BTF.
func Load[T any](p *Program, dir string, load func(*Result) (T, error)) (T, LoadInfo, error) {
	var li LoadInfo
	var zero T
	key, err := KernelKey(p.Object)
	if err != nil {
		return zero, li, err
	}
	if dir != "" {
		li.CachePath = CachePath(dir, p, key)
		c, err := ReadCache(li.CachePath, key)
		if err == nil {
			v, err := load(c)
			if err == nil {
				li.Cached = true
				return v, li, nil
			}
			li.CacheErr = fmt.Errorf("cached CO-RE result refused, relocating again: %w", err)
			os.Remove(li.CachePath)
		} else if !errors.Is(err, os.ErrNotExist) {
			li.CacheErr = err
		}
	}
	c, err := Relocate(p, key)
	if err != nil {
		return zero, li, err
	}
	v, err := load(c)
	if err != nil {
		return zero, li, err
	}
	if li.CachePath != "" {
		if err := WriteCache(li.CachePath, c); err != nil {
			werr := fmt.Errorf("writing CO-RE cache: %w", err)
			if li.CacheErr != nil {
				// One line, not errors.Join's two: the agent shows it as
				// one Degraded line.
				werr = fmt.Errorf("%w; %w", li.CacheErr, werr)
			}
			li.CacheErr = werr
			li.CachePath = ""
		}
	}
	return v, li, nil
}

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
