// Package sysfile reads small procfs and sysfs files with plain open(2)
// and read(2). os.ReadFile registers such a file with the Go runtime's
// network poller (procfs and sysfs files support poll), which starts the
// poller in a process that has no other use for it: an epoll instance, an
// eventfd, four more syscalls per file and idle threads polling it, in
// every one-shot `bpfleet list` (make bench BENCH=list).
package sysfile

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// Read returns the file's contents. Errors are *fs.PathError, as os's
// (errors.Is(err, fs.ErrNotExist) holds for a missing file).
func Read(path string) ([]byte, error) {
	return ReadUntil(path, nil)
}

// ReadUntil reads the file until its end or until enough, given what was
// read so far, says it is enough (nil: to the end), and returns what was
// read. A procfs file is generated as it is read: stopping early spares
// the kernel the rest (for /proc/cpuinfo, an entry per CPU).
func ReadUntil(path string, enough func([]byte) bool) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	b := make([]byte, 0, 4096)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
		if enough != nil && enough(b) {
			return b, nil
		}
	}
}

// Int parses a sysctl's non-negative decimal value and its newline, as
// procfs writes one (kernel.bpf_stats_enabled); -1 for anything else.
func Int(b []byte) int {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 9 {
		return -1
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}
