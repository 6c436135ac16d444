// Package perfattach attaches a program to a tracepoint the legacy way:
// perf_event_open on the tracepoint's id and PERF_EVENT_IOC_SET_BPF, with
// no bpf_link. That is how every loader attached kprobes, uprobes and
// tracepoints before Linux 5.15 (cilium/ebpf on those kernels, older
// libbpf, bcc): the program is then held by nothing but the perf_event
// fd. Test-only.
package perfattach

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tracefs mounts, the current one first.
var tracefs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// TracepointID is the id of tracepoint group:name, from tracefs.
func TracepointID(group, name string) (uint64, error) {
	var errs []error
	for _, dir := range tracefs {
		b, err := os.ReadFile(dir + "/events/" + group + "/" + name + "/id")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	return 0, fmt.Errorf("tracepoint %s:%s: %w", group, name, errors.Join(errs...))
}

// Open opens a perf event on tracepoint group:name for every task on CPU
// 0, with no program: the caller closes the fd.
func Open(group, name string) (int, error) {
	id, err := TracepointID(group, name)
	if err != nil {
		return -1, err
	}
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      id,
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("perf_event_open on tracepoint %s:%s: %w", group, name, err)
	}
	return fd, nil
}

// Tracepoint attaches the tracepoint program progFD to group:name and
// enables it; the returned perf_event fd is all that holds the
// attachment: closing it detaches the program.
func Tracepoint(progFD int, group, name string) (int, error) {
	fd, err := Open(group, name)
	if err != nil {
		return -1, err
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, progFD); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("PERF_EVENT_IOC_SET_BPF on tracepoint %s:%s: %w", group, name, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("enabling tracepoint %s:%s: %w", group, name, err)
	}
	return fd, nil
}
