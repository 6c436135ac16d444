package bpfsys

import (
	"errors"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The agent talks to bpf() directly instead of through cilium/ebpf's
// ProgramInfo: that one also reads fdinfo, translated and jited
// instructions on every call (several syscalls and kilobytes per program),
// while a scan needs exactly one BPF_OBJ_GET_INFO_BY_FD per program. The
// layouts below are the kernel's uapi structs (include/uapi/linux/bpf.h).

// The bpf(2) commands the project issues itself (enum bpf_cmd).
const (
	cmdMapGetNextKey  = 4  // BPF_MAP_GET_NEXT_KEY
	cmdProgLoad       = 5  // BPF_PROG_LOAD
	cmdObjGet         = 7  // BPF_OBJ_GET
	cmdProgTestRun    = 10 // BPF_PROG_TEST_RUN
	CmdProgGetNextID  = 11 // BPF_PROG_GET_NEXT_ID
	CmdProgGetFDByID  = 13 // BPF_PROG_GET_FD_BY_ID
	CmdMapGetFDByID   = 14 // BPF_MAP_GET_FD_BY_ID
	cmdObjGetInfoByFD = 15 // BPF_OBJ_GET_INFO_BY_FD
	cmdProgQuery      = 16 // BPF_PROG_QUERY
	CmdLinkGetFDByID  = 30 // BPF_LINK_GET_FD_BY_ID
	CmdLinkGetNextID  = 31 // BPF_LINK_GET_NEXT_ID
)

// ProgInfo is struct bpf_prog_info.
type ProgInfo struct {
	Type                 uint32
	ID                   uint32
	Tag                  [8]byte
	JitedProgLen         uint32
	XlatedProgLen        uint32
	JitedProgInsns       uint64
	XlatedProgInsns      uint64
	LoadTime             uint64 // ns since boot
	CreatedByUID         uint32
	NrMapIDs             uint32
	MapIDs               uint64
	Name                 [16]byte
	Ifindex              uint32
	GPLCompatible        uint32
	NetnsDev             uint64
	NetnsIno             uint64
	NrJitedKsyms         uint32
	NrJitedFuncLens      uint32
	JitedKsyms           uint64
	JitedFuncLens        uint64
	BTFID                uint32
	FuncInfoRecSize      uint32
	FuncInfo             uint64
	NrFuncInfo           uint32
	NrLineInfo           uint32
	LineInfo             uint64
	JitedLineInfo        uint64
	NrJitedLineInfo      uint32
	LineInfoRecSize      uint32
	JitedLineInfoRecSize uint32
	NrProgTags           uint32
	ProgTags             uint64
	RunTimeNs            uint64
	RunCnt               uint64
	RecursionMisses      uint64
	VerifiedInsns        uint32
	AttachBTFObjID       uint32
	AttachBTFID          uint32
	_                    uint32
}

// Offsets of the end of fields that not every kernel has: a kernel reports
// its own struct size in info_len, and a field beyond it is absent.
var (
	ProgInfoEndRecursionMisses = uint32(unsafe.Offsetof(ProgInfo{}.RecursionMisses) + 8)
	ProgInfoEndVerifiedInsns   = uint32(unsafe.Offsetof(ProgInfo{}.VerifiedInsns) + 4)
	ProgInfoEndAttachBTFID     = uint32(unsafe.Offsetof(ProgInfo{}.AttachBTFID) + 4)
)

type objGetInfoAttr struct {
	FD      uint32
	InfoLen uint32
	Info    uint64
}

type getIDAttr struct {
	ID     uint32 // start_id or prog_id/link_id
	NextID uint32
	Flags  uint32
}

// SyscallCount counts the syscalls scans make per object (bpf(), close(),
// and the fdinfo reads of first reads), so benchmarks can report them per
// program.
var SyscallCount atomic.Uint64

// The scan's syscalls go through RawSyscall: a bpf() command takes
// 7–30 µs, long enough for the Go scheduler to treat every ordinary
// Syscall as blocking and hand the P to another thread (futex wake-ups
// that cost more than the call). None of these calls can block for long.

// CloseFD closes an fd opened by a scan.
func CloseFD(fd int) {
	SyscallCount.Add(1)
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// bpfCall issues one bpf() command. Errno 0 is success.
func bpfCall(cmd int, attr unsafe.Pointer, size uintptr) (uintptr, error) {
	SyscallCount.Add(1)
	r, _, errno := unix.RawSyscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// NextID returns the next object id after start, or ok=false at the end.
func NextID(cmd int, start uint32) (uint32, bool, error) {
	attr := getIDAttr{ID: start}
	_, err := bpfCall(cmd, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if errors.Is(err, unix.ENOENT) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return attr.NextID, true, nil
}

// FDByID opens an object by id. The caller closes the fd.
func FDByID(cmd int, id uint32) (int, error) {
	attr := getIDAttr{ID: id}
	fd, err := bpfCall(cmd, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		return -1, err
	}
	return int(fd), nil
}

// ObjInfo fills info (a pointer to a uapi info struct of size bytes) and
// returns the size the kernel filled, which is its own struct size when
// that is smaller.
func ObjInfo(fd int, info unsafe.Pointer, size uint32) (uint32, error) {
	attr := objGetInfoAttr{FD: uint32(fd), InfoLen: size, Info: uint64(uintptr(info))}
	_, err := bpfCall(cmdObjGetInfoByFD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(info)
	if err != nil {
		return 0, err
	}
	return attr.InfoLen, nil
}
