package agent

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

const (
	cmdProgGetNextID  = 11 // BPF_PROG_GET_NEXT_ID
	cmdProgGetFDByID  = 13 // BPF_PROG_GET_FD_BY_ID
	cmdObjGetInfoByFD = 15 // BPF_OBJ_GET_INFO_BY_FD
	cmdLinkGetFDByID  = 30 // BPF_LINK_GET_FD_BY_ID
	cmdLinkGetNextID  = 31 // BPF_LINK_GET_NEXT_ID
)

// progInfo is struct bpf_prog_info.
type progInfo struct {
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
	progInfoEndRecursionMisses = uint32(unsafe.Offsetof(progInfo{}.RecursionMisses) + 8)
	progInfoEndVerifiedInsns   = uint32(unsafe.Offsetof(progInfo{}.VerifiedInsns) + 4)
	progInfoEndAttachBTFID     = uint32(unsafe.Offsetof(progInfo{}.AttachBTFID) + 4)
)

// linkInfo is struct bpf_link_info: a header and a union, read through the
// accessors below. The union is sized for current kernels; older ones fill
// less and say so in info_len.
type linkInfo struct {
	Type   uint32
	ID     uint32
	ProgID uint32
	_      uint32
	U      [64]byte
}

func (l *linkInfo) u32(off int) uint32 { return *(*uint32)(unsafe.Pointer(&l.U[off])) }
func (l *linkInfo) u64(off int) uint64 { return *(*uint64)(unsafe.Pointer(&l.U[off])) }
func (l *linkInfo) setU64(off int, v uint64) {
	*(*uint64)(unsafe.Pointer(&l.U[off])) = v
}
func (l *linkInfo) setU32(off int, v uint32) {
	*(*uint32)(unsafe.Pointer(&l.U[off])) = v
}

// Offsets inside the union (from the start of U).
const (
	// raw_tracepoint: tp_name (ptr), tp_name_len
	luRawTPName    = 0
	luRawTPNameLen = 8
	// tracing: attach_type, target_obj_id, target_btf_id
	luTracingAttachType = 0
	luTracingTargetObj  = 4
	luTracingTargetBTF  = 8
	// cgroup: cgroup_id (u64), attach_type
	luCgroupID         = 0
	luCgroupAttachType = 8
	// iter: target_name (ptr), target_name_len
	luIterName    = 0
	luIterNameLen = 8
	// netns: netns_ino, attach_type
	luNetnsAttachType = 4
	// xdp / tcx / netkit: ifindex (, attach_type)
	luIfindex      = 0
	luIfAttachType = 4
	// kprobe_multi: addrs, count, flags, missed
	luKMultiCount  = 8
	luKMultiFlags  = 12
	luKMultiMissed = 16
	// uprobe_multi: path, offsets, ref_ctr_offsets, cookies, path_size, count, flags, pid
	luUMultiPath     = 0
	luUMultiPathSize = 32
	luUMultiCount    = 36
	luUMultiFlags    = 40
	// perf_event: type, then a union at 8
	luPerfType = 0
	// perf_event.{kprobe,uprobe,tracepoint}: name ptr at 8, name_len at 16
	luPerfName    = 8
	luPerfNameLen = 16
	luPerfOffset  = 20
	// perf_event.kprobe.missed
	luPerfKprobeMissed = 32
	// netfilter: pf, hooknum, priority
	luNFPf       = 0
	luNFHooknum  = 4
	luNFPriority = 8
)

// A kernel exposes kprobe missed counters (perf_event kprobe and
// kprobe_multi links) exactly when its bpf_link_info reaches the end of
// perf_event.kprobe.missed: both were added together, and nothing before
// them made the union that large.
const linkInfoEndKprobeMissed = 16 + luPerfKprobeMissed + 8

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

// syscallCount counts the syscalls scans make per object (bpf(), close(),
// and the fdinfo reads of first reads), so benchmarks can report them per
// program.
var syscallCount atomic.Uint64

// The scan's syscalls go through RawSyscall: a bpf() command takes
// 7–30 µs, long enough for the Go scheduler to treat every ordinary
// Syscall as blocking and hand the P to another thread (futex wake-ups
// that cost more than the call). None of these calls can block for long.

// closeFD closes an fd opened by a scan.
func closeFD(fd int) {
	syscallCount.Add(1)
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
}

// bpfCall issues one bpf() command. Errno 0 is success.
func bpfCall(cmd int, attr unsafe.Pointer, size uintptr) (uintptr, error) {
	syscallCount.Add(1)
	r, _, errno := unix.RawSyscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// nextID returns the next object id after start, or ok=false at the end.
func nextID(cmd int, start uint32) (uint32, bool, error) {
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

// fdByID opens an object by id. The caller closes the fd.
func fdByID(cmd int, id uint32) (int, error) {
	attr := getIDAttr{ID: id}
	fd, err := bpfCall(cmd, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		return -1, err
	}
	return int(fd), nil
}

// objInfo fills info (a pointer to a uapi info struct of size bytes) and
// returns the size the kernel filled, which is its own struct size when
// that is smaller.
func objInfo(fd int, info unsafe.Pointer, size uint32) (uint32, error) {
	attr := objGetInfoAttr{FD: uint32(fd), InfoLen: size, Info: uint64(uintptr(info))}
	_, err := bpfCall(cmdObjGetInfoByFD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(info)
	if err != nil {
		return 0, err
	}
	return attr.InfoLen, nil
}
