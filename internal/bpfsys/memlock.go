package bpfsys

import (
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FdinfoFiles reads the "memlock:" line of our own fdinfo, the only place
// the kernel reports a program's memory charge. Opening and closing
// /proc/self/fdinfo/N was most of a first read's cost, so one goroutine
// keeps the file of each fd number it used open for the length of a scan:
// the kernel looks the number up again on every read from offset 0, and a
// scan that opens and closes one program at a time reuses the same few fd
// numbers. A reused file is trusted only when its prog_id line names the
// program expected; otherwise (a kernel without that line) it is reopened.
type FdinfoFiles struct {
	dir   *FdinfoDir
	files map[int]int // fd number → our open fdinfo file for it
}

// NewFdinfoFiles returns the kept files of one goroutine, opened relative
// to dir.
func NewFdinfoFiles(dir *FdinfoDir) FdinfoFiles {
	return FdinfoFiles{dir: dir, files: map[int]int{}}
}

// Memlock returns the memlock of program id, open as fd by the caller for
// the whole call (so no other goroutine can hold that number meanwhile).
func (f *FdinfoFiles) Memlock(fd int, id uint32) (uint64, bool) {
	var buf [512]byte
	if file, ok := f.files[fd]; ok {
		if b, ok := preadAt0(file, buf[:]); ok {
			if pid, ok := Field(b, "prog_id:"); ok && pid == uint64(id) {
				return Field(b, "memlock:")
			}
		}
		CloseFD(file)
		delete(f.files, fd)
	}
	if f.dir.dir < 0 { // procfs unreadable: the reader opened it before any call
		return 0, false
	}
	var name [24]byte
	nb := strconv.AppendInt(name[:0], int64(fd), 10)
	name[len(nb)] = 0
	SyscallCount.Add(1)
	file, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(f.dir.dir), uintptr(unsafe.Pointer(&name[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return 0, false
	}
	b, ok := preadAt0(int(file), buf[:])
	if !ok {
		CloseFD(int(file))
		return 0, false
	}
	if pid, ok := Field(b, "prog_id:"); ok && pid == uint64(id) {
		f.files[fd] = int(file)
	} else {
		CloseFD(int(file))
	}
	return Field(b, "memlock:")
}

// Release closes every kept file: none outlives the scan.
func (f *FdinfoFiles) Release() {
	for _, file := range f.files {
		CloseFD(file)
	}
	clear(f.files)
}

func preadAt0(fd int, buf []byte) ([]byte, bool) {
	SyscallCount.Add(1)
	n, _, errno := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	if errno != 0 || n == 0 {
		return nil, false
	}
	return buf[:n], true
}
