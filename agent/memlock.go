package agent

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// readMemlock reads the "memlock:" line of our own fdinfo for fd: the only
// place the kernel reports a program's memory charge. Read once per program,
// since it does not change after load.
func readMemlock(fd int) (uint64, bool) {
	path := "/proc/self/fdinfo/" + strconv.Itoa(fd)
	f, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(f)
	var buf [512]byte
	n, err := unix.Read(f, buf[:])
	if err != nil || n <= 0 {
		return 0, false
	}
	return fdinfoField(buf[:n], "memlock:")
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
