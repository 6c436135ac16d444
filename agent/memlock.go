package agent

import (
	"bytes"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdinfoDir reads our own fdinfo files. It holds /proc/self/fdinfo open
// and opens entries relative to it, which spares the kernel resolving
// /proc/self on every program of a first scan.
type fdinfoDir struct {
	dir int // -1 until first use
}

// memlock reads the "memlock:" line of our own fdinfo for fd: the only
// place the kernel reports a program's memory charge. Read once per program,
// since it does not change after load.
func (d *fdinfoDir) memlock(fd int) (uint64, bool) {
	if d.open(); d.dir < 0 {
		return 0, false
	}
	var name [24]byte
	b := strconv.AppendInt(name[:0], int64(fd), 10)
	name[len(b)] = 0
	f, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(d.dir), uintptr(unsafe.Pointer(&name[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return 0, false
	}
	defer closeFD(int(f))
	var buf [512]byte
	n, _, errno := unix.RawSyscall(unix.SYS_READ, f, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if errno != 0 || n == 0 {
		return 0, false
	}
	return fdinfoField(buf[:n], "memlock:")
}

// open opens the directory once; it must not race with memlock calls.
func (d *fdinfoDir) open() {
	if d.dir < 0 {
		if dir, err := unix.Open("/proc/self/fdinfo", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			d.dir = dir
		}
	}
}

func (d *fdinfoDir) close() {
	if d.dir >= 0 {
		unix.Close(d.dir)
		d.dir = -1
	}
}

// fdinfoField returns the unsigned value of a "key:\tvalue" line.
func fdinfoField(b []byte, key string) (uint64, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if rest, ok := bytes.CutPrefix(line, []byte(key)); ok {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
