package bpfsys

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BPF_TASK_FD_QUERY asks what program a process's fd carries and what it
// is attached to. The owner walk needs it for perf_event fds: a kprobe,
// uprobe or tracepoint attached with PERF_EVENT_IOC_SET_BPF (every kernel
// before 5.15, which has no perf_event bpf_link, and loaders that never
// used one) is held by nothing but its perf_event fd, which neither
// fdinfo nor BPF_OBJ_GET_INFO_BY_FD describe.

const cmdTaskFDQuery = 20 // BPF_TASK_FD_QUERY

// What BPF_TASK_FD_QUERY says an fd is (enum bpf_task_fd_type).
const (
	FDTypeRawTracepoint = 0 // a raw tracepoint link
	FDTypeTracepoint    = 1
	FDTypeKprobe        = 2
	FDTypeKretprobe     = 3
	FDTypeUprobe        = 4
	FDTypeUretprobe     = 5
)

// TaskFDQueryAttr is union bpf_attr's BPF_TASK_FD_QUERY member
// (include/uapi/linux/bpf.h, Linux 4.18), held to each kernel's BTF by
// layoutcheck.
type TaskFDQueryAttr struct {
	PID         uint32 // in: a pid of the caller's pid namespace
	FD          uint32 // in
	Flags       uint32 // in: 0
	BufLen      uint32 // in: Buf's size; out: the name's length
	Buf         uint64 // in: where the name goes
	ProgID      uint32 // out
	FDType      uint32 // out: FDType*
	ProbeOffset uint64 // out
	ProbeAddr   uint64 // out
}

// TaskFD is the kernel's answer about one process's fd.
type TaskFD struct {
	ProgID uint32
	// FDType is what the fd is attached to (FDType*).
	FDType uint32
	// Name is the tracepoint's name (without its category), the probed
	// function, or the probed binary's path; empty for a kprobe given by
	// address.
	Name string
	// Offset is a kprobe's offset into its function or a uprobe's into
	// its binary; Addr a kprobe's address where it was given by one (0
	// when the kernel hides addresses from the caller).
	Offset, Addr uint64
}

// PerfEventType is the kind (PerfEvent*) that a perf_event link of the
// same probe reports in its bpf_link_info: what lets a program attached
// without a link be named as one attached with it. 0 for a raw tracepoint
// and a type this package does not know.
func (q *TaskFD) PerfEventType() uint32 {
	switch q.FDType {
	case FDTypeTracepoint:
		return PerfEventTracepoint
	case FDTypeKprobe:
		return PerfEventKprobe
	case FDTypeKretprobe:
		return PerfEventKretprobe
	case FDTypeUprobe:
		return PerfEventUprobe
	case FDTypeUretprobe:
		return PerfEventUretprobe
	}
	return 0
}

// errENOTSUPP is the kernel-internal ENOTSUPP (524) that BPF_TASK_FD_QUERY
// returns for an fd that is neither a perf event nor a raw tracepoint
// link; x/sys/unix has no name for it.
const errENOTSUPP = unix.Errno(524)

// TaskFDQuery is BPF_TASK_FD_QUERY of fd of process pid (a pid of this
// process's pid namespace). *buf receives the name and grows when the
// kernel says the name did not fit. The kernel's answers:
//
//   - ENOENT: the fd carries no program (or the process is gone);
//   - EBADF: the process has no such fd (closed since it was listed);
//   - an error wrapping ebpf.ErrNotSupported: the kernel will not
//     describe this fd: not a perf event (ENOTSUPP), or a perf_event
//     program on a hardware or software event (EOPNOTSUPP);
//   - EPERM without CAP_SYS_ADMIN.
//
// A kernel without the command (before 4.18) answers EINVAL; bpfleet
// needs BTF and iterators and does not run there.
func TaskFDQuery(pid, fd int, buf *[]byte) (TaskFD, error) {
	if len(*buf) == 0 {
		*buf = make([]byte, 256)
	}
	for try := 0; ; try++ {
		b := *buf
		attr := TaskFDQueryAttr{PID: uint32(pid), FD: uint32(fd), BufLen: uint32(len(b)), Buf: uint64(uintptr(unsafe.Pointer(&b[0])))}
		_, err := call(cmdTaskFDQuery, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
		runtime.KeepAlive(b)
		switch {
		case err == nil:
			return decodeTaskFD(&attr, b), nil
		case errors.Is(err, unix.ENOSPC) && try == 0 && attr.BufLen >= uint32(len(b)):
			// The name was cut; BufLen is its whole length now.
			*buf = make([]byte, attr.BufLen+1)
			continue
		case errors.Is(err, errENOTSUPP), errors.Is(err, unix.EOPNOTSUPP):
			return TaskFD{}, fmt.Errorf("task fd query of pid %d fd %d: %w (%w)", pid, fd, ebpf.ErrNotSupported, err)
		}
		return TaskFD{}, err
	}
}

// decodeTaskFD reads the kernel's answer: attr as the kernel left it, b
// the buffer it wrote the NUL-terminated name into (cut to fit where it
// did not).
func decodeTaskFD(attr *TaskFDQueryAttr, b []byte) TaskFD {
	q := TaskFD{ProgID: attr.ProgID, FDType: attr.FDType, Offset: attr.ProbeOffset, Addr: attr.ProbeAddr}
	n := min(int(attr.BufLen), len(b))
	name := b[:n]
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	q.Name = string(name)
	return q
}
