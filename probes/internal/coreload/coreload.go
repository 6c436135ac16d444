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
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
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
