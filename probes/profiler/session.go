package profiler

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// fsession is what the kernel's BTF says of tracing sessions: the value of
// BPF_TRACE_FSESSION in enum bpf_attach_type and the two kfuncs' ids.
type fsession struct {
	attachType    uint32
	cookie, isRet btf.TypeID
}

var probeSession = sync.OnceValues(func() (fsession, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fsession{}, fmt.Errorf("reading kernel BTF: %w", err)
	}
	var enum *btf.Enum
	if err := spec.TypeByName("bpf_attach_type", &enum); err != nil {
		return fsession{}, fmt.Errorf("kernel BTF has no enum bpf_attach_type: %w", ebpf.ErrNotSupported)
	}
	var f fsession
	found := false
	for _, v := range enum.Values {
		if v.Name == "BPF_TRACE_FSESSION" {
			f.attachType, found = uint32(v.Value), true
		}
	}
	if !found {
		return fsession{}, fmt.Errorf("kernel has no BPF_TRACE_FSESSION attach type: %w", ebpf.ErrNotSupported)
	}
	for name, id := range map[string]*btf.TypeID{"bpf_session_cookie": &f.cookie, "bpf_session_is_return": &f.isRet} {
		var fn *btf.Func
		if err := spec.TypeByName(name, &fn); err != nil {
			return fsession{}, fmt.Errorf("kernel has no kfunc %s: %w", name, ebpf.ErrNotSupported)
		}
		if *id, err = spec.TypeID(fn); err != nil {
			return fsession{}, fmt.Errorf("kfunc %s: %w", name, err)
		}
	}
	return f, nil
})

// HaveSession says whether the kernel's BTF knows BPF_TRACE_FSESSION and its
// kfuncs: nil, or an error wrapping ebpf.ErrNotSupported with why. Whether
// the kernel then lets one attach to a BPF program only loading tells.
func HaveSession() error {
	_, err := probeSession()
	return err
}

// loadSession loads the session program with BPF_PROG_LOAD itself:
// cilium/ebpf v0.22 knows no BPF_TRACE_FSESSION and will not resolve a
// target for it. The maps come from coll; this fills their fds, the kfuncs'
// BTF ids and the target into the program and its load attributes, and
// returns the program with the attach type to link it with.
func loadSession(ps *ebpf.ProgramSpec, coll *ebpf.Collection, target *ebpf.Program, t Target) (*ebpf.Program, ebpf.AttachType, error) {
	fs, err := probeSession()
	if err != nil {
		return nil, 0, err
	}
	insns := make(asm.Instructions, len(ps.Instructions))
	copy(insns, ps.Instructions)
	for i := range insns {
		ins := &insns[i]
		switch {
		case ins.IsLoadFromMap():
			m := coll.Maps[ins.Reference()]
			if m == nil {
				return nil, 0, fmt.Errorf("session program: no map %q", ins.Reference())
			}
			// Keep the value offset (high half) of direct value loads.
			ins.Constant = int64(uint64(ins.Constant)&^0xffffffff | uint64(uint32(m.FD())))
		case ins.IsKfuncCall():
			switch ins.Reference() {
			case "bpf_session_cookie":
				ins.Constant = int64(fs.cookie)
			case "bpf_session_is_return":
				ins.Constant = int64(fs.isRet)
			default:
				return nil, 0, fmt.Errorf("session program: unknown kfunc %q", ins.Reference())
			}
			ins.Offset = 0 // vmlinux BTF
		case ins.IsFunctionCall():
			return nil, 0, fmt.Errorf("session program: BPF-to-BPF call at %d: the loader resolves none", i)
		}
	}
	var code bytes.Buffer
	if err := insns.Marshal(&code, ps.ByteOrder); err != nil {
		return nil, 0, fmt.Errorf("session program: %w", err)
	}
	btfID, err := targetFuncID(target, t.Func)
	if err != nil {
		return nil, 0, err
	}
	fd, err := progLoad(code.Bytes(), fs.attachType, uint32(target.FD()), btfID)
	runtime.KeepAlive(coll)
	runtime.KeepAlive(target)
	if err != nil {
		return nil, 0, refusal(t, "fsession", err)
	}
	prog, err := ebpf.NewProgramFromFD(fd)
	if err != nil {
		// fd is closed already: NewProgramFromFD owns it, failed or not
		// (closing it again could close another object's fd by its number).
		return nil, 0, fmt.Errorf("session program: %w", err)
	}
	return prog, ebpf.AttachType(fs.attachType), nil
}

// targetFuncID is the BTF id of fn in target's own BTF.
func targetFuncID(target *ebpf.Program, fn string) (uint32, error) {
	h, err := target.Handle()
	if err != nil {
		return 0, fmt.Errorf("reading the target's BTF: %w", err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return 0, fmt.Errorf("reading the target's BTF: %w", err)
	}
	var f *btf.Func
	if err := spec.TypeByName(fn, &f); err != nil {
		return 0, fmt.Errorf("target function %s: %w", fn, err)
	}
	id, err := spec.TypeID(f)
	return uint32(id), err
}

// progLoad is BPF_PROG_LOAD of a tracing program attached to a BPF
// program's function; on refusal it retries with the verifier log and
// returns its last line with the errno.
func progLoad(code []byte, attachType, targetFd, btfID uint32) (int, error) {
	license := []byte("GPL\x00")
	attr := bpfsys.ProgLoadAttr{
		ProgType:           uint32(ebpf.Tracing),
		InsnCnt:            uint32(len(code) / asm.InstructionSize),
		Insns:              uint64(uintptr(unsafe.Pointer(&code[0]))),
		License:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		ExpectedAttachType: attachType,
		AttachBTFID:        btfID,
		AttachFD:           targetFd,
	}
	copy(attr.ProgName[:], "prof_session")
	load := func() (int, error) {
		fd, err := bpfsys.ProgLoad(&attr)
		runtime.KeepAlive(code)
		runtime.KeepAlive(license)
		return fd, err
	}
	fd, err := load()
	if err == nil || errors.Is(err, unix.EPERM) {
		return fd, err
	}
	log := make([]byte, 1<<16)
	attr.LogLevel, attr.LogSize, attr.LogBuf = 1, uint32(len(log)), uint64(uintptr(unsafe.Pointer(&log[0])))
	fd, err2 := load()
	runtime.KeepAlive(log)
	if err2 == nil {
		return fd, nil // loaded with the log on: a transient refusal
	}
	// The verifier's reason: a line naming R0 at exit, or else its last
	// lines.
	lines := strings.Split(strings.TrimSpace(string(bytes.TrimRight(log, "\x00"))), "\n")
	for i, l := range lines {
		if strings.Contains(l, "should have been") || strings.Contains(l, "At program exit") {
			return -1, fmt.Errorf("verifier: %s: %w", strings.Join(lines[i:min(i+2, len(lines))], " "), err)
		}
	}
	lines = lines[max(0, len(lines)-3):]
	return -1, fmt.Errorf("verifier: %s: %w", strings.Join(lines, " | "), err)
}
