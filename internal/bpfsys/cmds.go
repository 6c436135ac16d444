package bpfsys

import (
	"encoding/binary"
	"errors"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The commands below are not a scan's: they are not counted in
// SyscallCount, and those that may sleep (a program load, a test run) go
// through Syscall so the Go scheduler can run others meanwhile.

// call issues one bpf() command that may block.
func call(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// ProgLoadAttr is union bpf_attr's BPF_PROG_LOAD member up to fd_array
// (Linux 5.14); an older kernel accepts it while the fields it lacks are
// zero.
type ProgLoadAttr struct {
	ProgType           uint32
	InsnCnt            uint32
	Insns              uint64
	License            uint64
	LogLevel           uint32
	LogSize            uint32
	LogBuf             uint64
	KernVersion        uint32
	ProgFlags          uint32
	ProgName           [16]byte
	ProgIfindex        uint32
	ExpectedAttachType uint32
	ProgBTFFD          uint32
	FuncInfoRecSize    uint32
	FuncInfo           uint64
	FuncInfoCnt        uint32
	LineInfoRecSize    uint32
	LineInfo           uint64
	LineInfoCnt        uint32
	AttachBTFID        uint32
	// AttachFD is attach_prog_fd (a program to attach to) or, in the
	// same place, attach_btf_obj_fd (a module's BTF; 0: vmlinux).
	AttachFD    uint32
	CoreReloCnt uint32
	FDArray     uint64
}

// ProgLoad is BPF_PROG_LOAD, retried while the kernel asks for it (the
// verifier was interrupted).
func ProgLoad(attr *ProgLoadAttr) (int, error) {
	for {
		fd, err := call(cmdProgLoad, unsafe.Pointer(attr), unsafe.Sizeof(*attr))
		runtime.KeepAlive(attr)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}

// TestRunAttr is union bpf_attr's BPF_PROG_TEST_RUN member.
type TestRunAttr struct {
	ProgFD      uint32
	Retval      uint32
	DataSizeIn  uint32
	DataSizeOut uint32
	DataIn      uint64
	DataOut     uint64
	Repeat      uint32
	Duration    uint32
	CtxSizeIn   uint32
	CtxSizeOut  uint32
	CtxIn       uint64
	CtxOut      uint64
	Flags       uint32
	CPU         uint32
	BatchSize   uint32
	_           uint32
}

// ProgTestRun is BPF_PROG_TEST_RUN; the kernel writes Retval (and the
// outputs) into attr.
func ProgTestRun(attr *TestRunAttr) error {
	_, err := call(cmdProgTestRun, unsafe.Pointer(attr), unsafe.Sizeof(*attr))
	runtime.KeepAlive(attr)
	return err
}

// MapNextKey is BPF_MAP_GET_NEXT_KEY on the map open as fd: the key after
// key (nil: the first) is written to next, both of the map's key size.
// ENOENT: key was the last.
func MapNextKey(fd int, key, next []byte) error {
	attr := struct {
		fd      uint32
		_       uint32
		key     uint64
		nextKey uint64
	}{fd: uint32(fd), nextKey: uint64(uintptr(unsafe.Pointer(&next[0])))}
	if key != nil {
		attr.key = uint64(uintptr(unsafe.Pointer(&key[0])))
	}
	_, err := call(cmdMapGetNextKey, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(key)
	runtime.KeepAlive(next)
	return err
}

// ObjGet is BPF_OBJ_GET of a pinned object. Its flags are 0 (read-write):
// the kernel refuses read-only opens of links.
func ObjGet(path string) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	attr := struct {
		pathname  uint64
		bpfFD     uint32
		fileFlags uint32
		pathFD    int32
		_         uint32
	}{pathname: uint64(uintptr(unsafe.Pointer(p)))}
	fd, err := call(cmdObjGet, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(p)
	return fd, err
}

// ProgQueryBadFD is BPF_PROG_QUERY of attachType on an invalid fd: the
// kernel answers EBADF where it lets this process query at all, and EPERM
// where the caller lacks the capability it wants.
func ProgQueryBadFD(attachType uint32) error {
	var attr [40]byte // query: target_fd, attach_type, ...
	binary.NativeEndian.PutUint32(attr[0:], ^uint32(0))
	binary.NativeEndian.PutUint32(attr[4:], attachType)
	_, err := call(cmdProgQuery, unsafe.Pointer(&attr[0]), uintptr(len(attr)))
	return err
}

// ObjIDs reads the ids behind a program or link fd with the leading
// fields of bpf_prog_info (type, id) or bpf_link_info (type, id,
// prog_id): the kernel fills no more than asked. For a program progID is
// its id.
func ObjIDs(fd int, link bool) (id, progID uint32, err error) {
	var info [3]uint32
	attr := objGetInfoAttr{FD: uint32(fd), InfoLen: 8, Info: uint64(uintptr(unsafe.Pointer(&info[0])))}
	if link {
		attr.InfoLen = 12
	}
	// RawSyscall: about a microsecond, called for every BPF fd the owner
	// walk duplicates.
	if _, _, errno := unix.RawSyscall(unix.SYS_BPF, cmdObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
		return 0, 0, errno
	}
	if link {
		return info[1], info[2], nil
	}
	return info[1], info[1], nil
}
