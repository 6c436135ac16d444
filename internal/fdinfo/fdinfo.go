// Package fdinfo reads fields of this process's /proc/self/fdinfo entries:
// the only place the kernel reports a BPF object's memory charge
// ("memlock:"), which neither bpf_prog_info nor bpf_map_info carries.
package fdinfo

import (
	"bytes"
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Dir is /proc/self/fdinfo, held open so that entries are opened relative
// to it: that spares the kernel resolving /proc/self for every fd read.
type Dir struct{ fd int }

// Open opens /proc/self/fdinfo.
func Open() (*Dir, error) {
	fd, err := unix.Open("/proc/self/fdinfo", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /proc/self/fdinfo: %w", err)
	}
	return &Dir{fd: fd}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Read reads fd's fdinfo entry into buf (512 bytes hold a BPF map's or
// program's whole entry) and returns what was read.
func (d *Dir) Read(fd int, buf []byte) ([]byte, error) {
	var name [24]byte
	nb := strconv.AppendInt(name[:0], int64(fd), 10)
	name[len(nb)] = 0
	f, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(d.fd), uintptr(unsafe.Pointer(&name[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("opening fdinfo of fd %d: %w", fd, errno)
	}
	defer unix.Close(int(f))
	n, err := unix.Pread(int(f), buf, 0)
	if err != nil {
		return nil, fmt.Errorf("reading fdinfo of fd %d: %w", fd, err)
	}
	return buf[:n], nil
}

// Field returns the unsigned value of a "key:\tvalue" line of an fdinfo
// entry; key includes the colon ("memlock:").
func Field(b []byte, key string) (uint64, bool) {
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
