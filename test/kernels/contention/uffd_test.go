//go:build linux

package contention

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The userfaultfd ABI (linux/userfaultfd.h); x/sys/unix has the syscall
// number but not the ioctls. The encoding is the same on amd64 and arm64.
const (
	uffdAPI            = 0xaa
	uffdioAPI          = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
	uffdioRegister     = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
	uffdioCopy         = 0xc028aa03 // _IOWR(0xaa, 0x03, struct uffdio_copy)
	uffdRegisterMiss   = 1          // UFFDIO_REGISTER_MODE_MISSING
	uffdEventPagefault = 0x12
	uffdMsgSize        = 32
)

type uffdioAPIArg struct{ API, Features, Ioctls uint64 }
type uffdioRegisterArg struct{ Start, Len, Mode, Ioctls uint64 }
type uffdioCopyArg struct {
	Dst, Src, Len, Mode uint64
	Copy                int64
}

// uffdPage is one anonymous page whose first touch blocks the touching
// thread — a kernel copy_from_user included — until fill is called.
type uffdPage struct {
	fd   int
	mem  []byte
	addr uintptr
}

func newUffdPage() (*uffdPage, error) {
	// No UFFD_USER_MODE_ONLY: the fault to catch is the kernel's own
	// copy_from_user, which needs root (or CAP_SYS_PTRACE) unless
	// vm.unprivileged_userfaultfd is 1.
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("userfaultfd: %w", errno)
	}
	u := &uffdPage{fd: int(fd)}
	api := uffdioAPIArg{API: uffdAPI}
	if err := u.ioctl(uffdioAPI, unsafe.Pointer(&api)); err != nil {
		u.Close()
		return nil, fmt.Errorf("UFFDIO_API: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("mmap: %w", err)
	}
	u.mem = mem
	u.addr = uintptr(unsafe.Pointer(&mem[0]))
	reg := uffdioRegisterArg{Start: uint64(u.addr), Len: uint64(len(mem)), Mode: uffdRegisterMiss}
	if err := u.ioctl(uffdioRegister, unsafe.Pointer(&reg)); err != nil {
		u.Close()
		return nil, fmt.Errorf("UFFDIO_REGISTER: %w", err)
	}
	return u, nil
}

func (u *uffdPage) ioctl(req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(u.fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// waitFault returns the address of the first missing-page fault on the
// page, or an error after timeout.
func (u *uffdPage) waitFault(timeout time.Duration) (uint64, error) {
	fds := []unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("no fault on the userfaultfd page within %s", timeout)
		}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("polling userfaultfd: %w", err)
		}
		if n == 0 {
			continue
		}
		var msg [uffdMsgSize]byte
		if _, err := unix.Read(u.fd, msg[:]); err != nil {
			return 0, fmt.Errorf("reading userfaultfd: %w", err)
		}
		if msg[0] != uffdEventPagefault {
			return 0, fmt.Errorf("userfaultfd event %#x, want a page fault", msg[0])
		}
		return binary.NativeEndian.Uint64(msg[16:]), nil
	}
}

// fill resolves the fault: the page appears holding v at offset 0 and the
// blocked thread resumes.
func (u *uffdPage) fill(v uint64) error {
	src := make([]byte, len(u.mem))
	binary.NativeEndian.PutUint64(src, v)
	c := uffdioCopyArg{Dst: uint64(u.addr), Src: uint64(uintptr(unsafe.Pointer(&src[0]))), Len: uint64(len(src))}
	err := u.ioctl(uffdioCopy, unsafe.Pointer(&c))
	runtime.KeepAlive(src)
	if err != nil {
		return fmt.Errorf("UFFDIO_COPY: %w (copied %d)", err, c.Copy)
	}
	return nil
}

func (u *uffdPage) Close() {
	if u.mem != nil {
		unix.Munmap(u.mem)
	}
	unix.Close(u.fd)
}
