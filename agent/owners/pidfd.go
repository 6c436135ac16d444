package owners

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// dupIDs reads the ids behind another process's BPF fd by duplicating it
// with pidfd_getfd(2) and asking bpf(BPF_OBJ_GET_INFO_BY_FD): three
// syscalls of about a microsecond each, where opening, rendering and
// closing its fdinfo costs about ten. The duplicate is closed at once; the
// holder's fd is untouched (closing a dup never releases the file).
//
// pidfd_getfd needs ptrace attach access to the holder, which is stricter
// than reading fdinfo: Yama, seccomp or an LSM may refuse it, and kernels
// before 5.6 lack it. Every refusal is answered by falling back to fdinfo.
func dupIDs(pidfd, fd int, isProg bool) (Holding, error) {
	r, _, e := unix.RawSyscall(unix.SYS_PIDFD_GETFD, uintptr(pidfd), uintptr(fd), 0)
	if e != 0 {
		return Holding{}, errnoErr(e)
	}
	defer unix.RawSyscall(unix.SYS_CLOSE, r, 0, 0)
	id, progID, err := bpfsys.ObjIDs(int(r), !isProg)
	if err != nil {
		return Holding{}, err
	}
	if isProg {
		return Holding{ProgID: progID}, nil
	}
	return Holding{LinkID: id, ProgID: progID}, nil
}

// pidfdOpen opens a pidfd for pid: ESRCH when it exited, ENOSYS before
// Linux 5.3.
func pidfdOpen(pid int32) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_PIDFD_OPEN, uintptr(pid), 0, 0)
	if e != 0 {
		return -1, errnoErr(e)
	}
	return int(r), nil
}

// samePidNamespace reports whether the procfs at root shows pids of our own
// pid namespace: pidfd_open takes our pids, so on a procfs of another
// namespace (a host /proc mounted into a container without hostPID) the
// walk must stay with fdinfo. root/self names our pid as that procfs
// numbers it.
func samePidNamespace(root string) bool {
	self, err := os.Readlink(root + "/self")
	return err == nil && self == strconv.Itoa(os.Getpid())
}
