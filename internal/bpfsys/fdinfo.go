package bpfsys

import (
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdinfo is the only place the kernel reports a BPF object's memory charge
// ("memlock:", in neither bpf_prog_info nor bpf_map_info), and, for
// another process's fd, which program or link it holds. Every fdinfo read
// of the project is here.

// FdinfoDir is /proc/self/fdinfo, held open so that entries are opened
// relative to it: that spares the kernel resolving /proc/self for every
// fd read.
type FdinfoDir struct {
	dir int // -1 until opened
}

// NewFdinfoDir returns a directory not opened yet.
func NewFdinfoDir() FdinfoDir { return FdinfoDir{dir: -1} }

// Open opens the directory unless it is open. Call it before any
// FdinfoFiles read: they share it from several goroutines and only read
// it.
func (d *FdinfoDir) Open() error {
	if d.dir >= 0 {
		return nil
	}
	dir, err := unix.Open("/proc/self/fdinfo", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /proc/self/fdinfo: %w", err)
	}
	d.dir = dir
	return nil
}

// Close closes the directory; a later Open opens it again.
func (d *FdinfoDir) Close() error {
	if d.dir < 0 {
		return nil
	}
	err := unix.Close(d.dir)
	d.dir = -1
	return err
}

// Read reads fd's fdinfo entry into buf (512 bytes hold a BPF map's or
// program's whole entry) and returns what was read.
func (d *FdinfoDir) Read(fd int, buf []byte) ([]byte, error) {
	if d.dir < 0 {
		return nil, fmt.Errorf("reading fdinfo of fd %d: /proc/self/fdinfo not open", fd)
	}
	var name [24]byte
	nb := strconv.AppendInt(name[:0], int64(fd), 10)
	name[len(nb)] = 0
	f, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(d.dir), uintptr(unsafe.Pointer(&name[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
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

// Field returns the unsigned decimal value of a "key:\tvalue" line of an
// fdinfo entry; key includes the colon ("memlock:"). Every other line, and
// a value that is not a decimal number, is passed over: fdinfo grows new
// lines with kernel versions and must never break a reader. It does not
// allocate: the owner walk calls it for every BPF fd on the node.
func Field(b []byte, key string) (uint64, bool) {
	for len(b) > 0 {
		line := b
		if i := indexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) >= len(key) && string(line[:len(key)]) == key {
			return ParseUint64(trimSpace(line[len(key):]))
		}
	}
	return 0, false
}

// FDInfo is what an fdinfo entry says of a BPF fd: a program fd has ProgID
// set; a link fd has LinkID and (for links with a program) ProgID.
type FDInfo struct {
	ProgID uint32
	LinkID uint32
}

// ParseFDInfo reads the prog_id: and link_id: lines of an fdinfo entry; a
// value that does not fit 32 bits counts as absent.
func ParseFDInfo(b []byte) FDInfo {
	var fi FDInfo
	if v, ok := Field(b, "prog_id:"); ok && v <= 1<<32-1 {
		fi.ProgID = uint32(v)
	}
	if v, ok := Field(b, "link_id:"); ok && v <= 1<<32-1 {
		fi.LinkID = uint32(v)
	}
	return fi
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// ParseUint64 parses a non-empty decimal number without allocating.
func ParseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
