package owners

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Holding is one fd of one process that refers to a BPF program or link,
// or a perf_event fd that may carry a program.
type Holding struct {
	PID int32
	FD  int32
	// ProgID is the program, for a link fd the link's program (0 for a
	// link without one), for a perf_event fd its program where the source
	// knows it (the iterator), else 0.
	ProgID uint32
	// LinkID is non-zero for a link fd.
	LinkID uint32
	// Perf marks a perf_event fd: the Scanner asks the kernel
	// (BPF_TASK_FD_QUERY) what program it carries and what that is
	// attached to.
	Perf bool
}

// Source lists the BPF program and link fds that processes hold, and their
// perf_event fds. ProcSource reads /proc; a task_file BPF iterator answers
// the same in one read (listing only perf_event fds that carry a program)
// and can be plugged into a Scanner instead.
type Source interface {
	// Holdings appends what it finds to dst and counts its work in st.
	// An error means the source as a whole failed (procfs missing, the
	// iterator could not run); per-process trouble is only counted.
	Holdings(dst []Holding, st *Stats) ([]Holding, error)
}

// Stats is a scan's account of its own work. Processes and fds that vanish
// mid-walk and files the agent may not read are normal on a busy node and
// counted, never fatal.
type Stats struct {
	Procs  int `json:"procs"`
	FDs    int `json:"fds"`
	BPFFDs int `json:"bpf_fds"`
	// ByPidfd counts the BPF fds read through pidfd_getfd, not fdinfo.
	ByPidfd int `json:"by_pidfd"`
	// PerfFDs counts the perf_event fds the kernel was asked about
	// (BPF_TASK_FD_QUERY), PerfProgs those that carry a program.
	PerfFDs   int `json:"perf_fds"`
	PerfProgs int `json:"perf_progs"`
	Vanished  int `json:"vanished"`
	Denied    int `json:"denied"`
	Errors    int `json:"errors"`
	// LastError is the most recent error counted in Errors or Denied.
	LastError string `json:"last_error,omitempty"`
}

func (st *Stats) count(err error, what string) {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		st.Vanished++
		return
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		st.Denied++
	default:
		st.Errors++
	}
	st.LastError = what + ": " + err.Error()
}

// The link targets of BPF fds in /proc/PID/fd, and of perf_event fds,
// which carry a program attached with PERF_EVENT_IOC_SET_BPF.
// A link's fd is named "bpf_link" where the link was made
// (bpf_link_prime) and "bpf-link" where it was opened again from a pin or
// by id (bpf_link_new_fd).
const (
	linkBPFProg    = "anon_inode:bpf-prog"
	linkBPFLink    = "anon_inode:bpf_link"
	linkBPFLinkGot = "anon_inode:bpf-link"
	linkPerfEvent  = "anon_inode:[perf_event]"
)

// ProcSource walks /proc/*/fd. It reads directories with getdents into
// reused buffers and resolves each fd with readlinkat relative to the fd
// directory, passing names straight out of the dirent buffer, so the walk
// does not allocate per process or per fd. Only fds that are BPF programs or
// links cost more: a pidfd_getfd and a bpf() info call where the kernel
// allows it (dupIDs), an fdinfo read where not; perf_event fds are listed
// for the Scanner's query. It is not safe for concurrent use.
//
// Only thread-group leaders are walked (/proc lists no others): a thread
// that unshared its fd table (clone without CLONE_FILES) is not seen.
type ProcSource struct {
	root    string
	dents   []byte // /proc
	fdDents []byte // /proc/PID/fd
	path    []byte // NUL-terminated relative paths
	link    []byte
	info    []byte
	// dup says BPF fds are read with pidfd_getfd (dupIDs) rather than
	// fdinfo: decided at the first walk, turned off when the kernel lacks
	// the syscall.
	dup, dupKnown bool

	// afterList, when set, runs after a process's fd directory was opened
	// and before it is read: tests use it to make the process exit mid-walk.
	afterList func(pid int32)
	// skip is a pid Holdings leaves out (0: none): the Scanner's own
	// process, during WalkOthers.
	skip int32
}

// NewProcSource returns a Source reading the procfs mounted at root
// ("/proc" when empty).
func NewProcSource(root string) *ProcSource {
	if root == "" {
		root = "/proc"
	}
	return &ProcSource{
		root:    root,
		dents:   make([]byte, 32<<10),
		fdDents: make([]byte, 32<<10),
		path:    make([]byte, 0, 64),
		link:    make([]byte, 32), // longer targets are not ours
		info:    make([]byte, 4<<10),
	}
}

// Holdings implements Source.
func (s *ProcSource) Holdings(dst []Holding, st *Stats) ([]Holding, error) {
	procfd, err := unix.Open(s.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dst, fmt.Errorf("opening procfs %s: %w", s.root, err)
	}
	defer unix.Close(procfd)
	if !s.dupKnown {
		s.dup, s.dupKnown = samePidNamespace(s.root), true
	}
	for {
		n, err := unix.Getdents(procfd, s.dents)
		if err != nil {
			return dst, fmt.Errorf("reading %s: %w", s.root, err)
		}
		if n <= 0 {
			return dst, nil
		}
		for off := 0; off < n; {
			name, next := dirent(s.dents, off)
			off = next
			pid, ok := parseUint32(name)
			if !ok || pid == 0 || pid > 1<<31-1 || int32(pid) == s.skip {
				continue // self, thread-self, sys, ...
			}
			dst = s.walkPID(procfd, name, int32(pid), dst, st)
		}
	}
}

// holdingsOf is Holdings for the one process pid.
func (s *ProcSource) holdingsOf(pid int32, dst []Holding, st *Stats) []Holding {
	procfd, err := unix.Open(s.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		st.count(err, "opening procfs "+s.root)
		return dst
	}
	defer unix.Close(procfd)
	if !s.dupKnown {
		s.dup, s.dupKnown = samePidNamespace(s.root), true
	}
	return s.walkPID(procfd, []byte(itoa(pid)), pid, dst, st)
}

func (s *ProcSource) walkPID(procfd int, pidName []byte, pid int32, dst []Holding, st *Stats) []Holding {
	st.Procs++
	s.path = append(append(s.path[:0], pidName...), "/fd\x00"...)
	fdDir, err := openat(procfd, s.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		st.count(err, "opening fds of pid "+string(pidName))
		return dst
	}
	defer unix.Close(fdDir)
	p := holder{pid: pid, name: pidName, pidfd: -1, infoDir: -1}
	defer p.close()
	if s.afterList != nil {
		s.afterList(pid)
	}
	for {
		n, err := unix.Getdents(fdDir, s.fdDents)
		if err != nil {
			st.count(err, "reading fds of pid "+string(pidName))
			return dst
		}
		if n <= 0 {
			return dst
		}
		// Only a reply of 0 ends the directory: getdents returns early,
		// with room left, whenever a signal is pending for the reader
		// (filldir64 stops after the first entry then; SIGURG, SIGCHLD
		// are common in a Go process), so "a short reply was the last"
		// lost a process's later fds, its BPF programs among them.
		for off := 0; off < n; {
			nameOff, next := direntNameOff(s.fdDents, off)
			off = next
			name := cstr(s.fdDents[nameOff:next])
			fd, ok := parseUint32(name)
			if !ok {
				continue // . and ..
			}
			st.FDs++
			// The name is NUL-terminated inside the dirent buffer.
			ln, err := readlinkat(fdDir, &s.fdDents[nameOff], s.link)
			if err != nil {
				st.count(err, "reading fd links of pid "+string(pidName))
				if err == unix.EACCES || err == unix.EPERM {
					return dst // the same answer for every fd of this process
				}
				continue
			}
			if ln >= len(s.link) {
				continue
			}
			target := s.link[:ln]
			if string(target) == linkPerfEvent {
				// Neither fdinfo nor OBJ_GET_INFO describe it: the
				// Scanner asks the kernel.
				dst = append(dst, Holding{PID: pid, FD: int32(fd), Perf: true})
				continue
			}
			isProg := string(target) == linkBPFProg
			if !isProg && string(target) != linkBPFLink && string(target) != linkBPFLinkGot {
				continue
			}
			st.BPFFDs++
			h, ok, stop := s.resolve(&p, procfd, &s.fdDents[nameOff], int(fd), isProg, st)
			if stop {
				return dst
			}
			if !ok {
				continue
			}
			dst = append(dst, h)
		}
	}
}

// holder is the process whose BPF fds walkPID resolves: through a pidfd
// (dupIDs) while the kernel allows it, else through its fdinfo directory.
// Both are opened at its first BPF fd.
type holder struct {
	pid            int32
	name           []byte
	pidfd, infoDir int
	opened         bool
}

func (p *holder) close() {
	for _, fd := range [...]int{p.pidfd, p.infoDir} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// resolve returns the ids behind BPF fd of p (name is its NUL-terminated
// entry); ok is false when there is nothing to record, stop when the rest
// of p's fds need not be tried.
func (s *ProcSource) resolve(p *holder, procfd int, name *byte, fd int, isProg bool, st *Stats) (h Holding, ok, stop bool) {
	if !p.opened && s.dup {
		p.opened = true
		var err error
		switch p.pidfd, err = pidfdOpen(p.pid); err {
		case unix.ESRCH:
			st.Vanished++
			return h, false, true
		case unix.ENOSYS:
			s.dup = false
		}
	}
	h.PID, h.FD = p.pid, int32(fd)
	if p.pidfd >= 0 {
		ids, err := dupIDs(p.pidfd, fd, isProg)
		switch err {
		case nil:
			st.ByPidfd++
			h.ProgID, h.LinkID = ids.ProgID, ids.LinkID
			return h, isProg && h.ProgID != 0 || !isProg && h.LinkID != 0, false
		case unix.EBADF:
			st.Vanished++ // closed since it was listed
			return h, false, false
		case unix.ENOSYS:
			s.dup = false
		}
		// Refused (ptrace access, seccomp, an LSM): fdinfo for the rest
		// of this process.
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	if p.infoDir < 0 {
		s.path = append(append(s.path[:0], p.name...), "/fdinfo\x00"...)
		var err error
		if p.infoDir, err = openat(procfd, s.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC); err != nil {
			st.count(err, "opening fdinfo of pid "+string(p.name))
			return h, false, true
		}
	}
	b, err := s.readAt(p.infoDir, name)
	if err != nil {
		st.count(err, "reading fdinfo of pid "+string(p.name))
		return h, false, false
	}
	fi := bpfsys.ParseFDInfo(b)
	h.ProgID = fi.ProgID
	if !isProg {
		h.LinkID = fi.LinkID
	}
	return h, isProg && h.ProgID != 0 || !isProg && h.LinkID != 0, false
}

// readAt reads a fdinfo file relative to dirfd into s.info; name is
// NUL-terminated. A fdinfo file is one seq_file record, which procfs hands
// over whole in one read when it fits (a BPF fd's is a few hundred bytes),
// so the read that would return 0 is saved.
func (s *ProcSource) readAt(dirfd int, name *byte) ([]byte, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(name)), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
	if e != 0 {
		return nil, errnoErr(e)
	}
	defer unix.RawSyscall(unix.SYS_CLOSE, r, 0, 0)
	n, _, e := unix.RawSyscall(unix.SYS_READ, r, uintptr(unsafe.Pointer(&s.info[0])), uintptr(len(s.info)))
	if e != 0 {
		return nil, errnoErr(e)
	}
	return s.info[:n], nil
}

// linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[].
const direntNameStart = 19

func direntNameOff(buf []byte, off int) (nameOff, next int) {
	reclen := int(buf[off+16]) | int(buf[off+17])<<8
	if reclen < direntNameStart || off+reclen > len(buf) {
		return len(buf), len(buf) // corrupt: stop
	}
	return off + direntNameStart, off + reclen
}

// eachDirent reads the open directory fd to its end with getdents into
// buf, calling fn with each entry's name (valid only during the call),
// inode and d_type; "." and ".." are left out. Only a reply of 0 ends the
// directory (a pending signal cuts a reply short). The /proc walk, the hot
// path, keeps loops of its own.
func eachDirent(fd int, buf []byte, fn func(name []byte, ino uint64, typ byte)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off < n; {
			nameOff, next := direntNameOff(buf, off)
			if next > n {
				break
			}
			name := cstr(buf[nameOff:next])
			if string(name) != "." && string(name) != ".." {
				fn(name, binary.NativeEndian.Uint64(buf[off:]), buf[off+18])
			}
			off = next
		}
	}
}

func dirent(buf []byte, off int) (name []byte, next int) {
	nameOff, next := direntNameOff(buf, off)
	return cstr(buf[nameOff:next]), next
}

// cstr cuts b at its first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// openat and readlinkat take NUL-terminated byte paths: the x/sys wrappers
// take strings and allocate a copy per call. They, and the small reads of
// procfs files, go through RawSyscall: each is a few µs in memory, and an
// ordinary Syscall lets the scheduler hand off the P on every one of the
// thousands a walk makes.
func openat(dirfd int, path []byte, flags int) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])), uintptr(flags), 0, 0, 0)
	if e != 0 {
		return -1, errnoErr(e)
	}
	return int(r), nil
}

func readlinkat(dirfd int, path *byte, buf []byte) (int, error) {
	r, _, e := unix.RawSyscall6(unix.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(r), nil
}

// errnoErr returns common errnos as their shared values, so counting them
// does not allocate.
func errnoErr(e unix.Errno) error {
	switch e {
	case unix.ENOENT:
		return unix.ENOENT
	case unix.ESRCH:
		return unix.ESRCH
	case unix.EACCES:
		return unix.EACCES
	case unix.EBADF:
		return unix.EBADF
	case unix.ENOSYS:
		return unix.ENOSYS
	}
	return e
}

func itoa(v int32) string { return strconv.FormatInt(int64(v), 10) }
