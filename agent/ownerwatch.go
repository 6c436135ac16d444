package agent

import (
	"golang.org/x/sys/unix"
)

// ownerWatch holds a pidfd for every process that owned a program at the
// last owner refresh. A pidfd does not keep anything of the process alive
// (unlike a program fd, which would keep the program loaded) and becomes
// readable when the process exits: one poll(2) over all of them tells,
// every scan, whether an owner is gone — the change the periodic owner
// refresh used to exist for (a restarted daemon re-opening its pinned
// programs under a new pid). So the full walk runs only when a program id
// without an owner appears, an owner exits, or the slow period passes.
type ownerWatch struct {
	fds []unix.PollFd
	// pids[i] is the process fds[i] watches.
	pids []int
	kept map[int]bool // scratch for reset
	// broken says the kernel refused pidfds (before Linux 5.3) or there
	// are too many owners to watch: the caller keeps the short period.
	broken bool
}

// maxWatched bounds the pidfds held: a node where thousands of processes
// hold BPF fds (a socket filter per process) keeps the short period.
const maxWatched = 1024

// reset watches pids: one pidfd per distinct pid. A pidfd of the last reset
// whose process still runs and is still an owner is kept (the pid cannot
// name another process while it runs), so a refresh opens pidfds only for
// new owners and closes only those of owners gone.
func (w *ownerWatch) reset(pids map[int]bool) {
	if w.broken || len(pids) > maxWatched {
		w.close() // a broken watch retries every pid
	}
	w.broken = false
	if len(pids) > maxWatched {
		w.broken = true
		return
	}
	// Which watched processes have exited: one poll over all of them.
	polled := len(w.fds) == 0
	for !polled {
		_, err := unix.Poll(w.fds, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			w.close() // cannot tell: open every pidfd afresh
		}
		polled = true
	}
	if w.kept == nil {
		w.kept = map[int]bool{}
	}
	clear(w.kept)
	n := 0
	for i, p := range w.fds {
		pid := w.pids[i]
		if p.Fd >= 0 && p.Revents == 0 && pids[pid] {
			w.fds[n], w.pids[n] = p, pid
			w.kept[pid] = true
			n++
			continue
		}
		if p.Fd >= 0 {
			unix.Close(int(p.Fd))
		}
	}
	w.fds, w.pids = w.fds[:n], w.pids[:n]
	for pid := range pids {
		if w.kept[pid] {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == unix.ESRCH:
			// Gone already: the next scan's poll cannot see it, so say so
			// with a pidfd-less marker.
			w.fds = append(w.fds, unix.PollFd{Fd: -1, Revents: unix.POLLIN})
		case err != nil:
			w.close()
			w.broken = true
			return
		default:
			w.fds = append(w.fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
		w.pids = append(w.pids, pid)
	}
}

// exited reports whether a watched owner has exited since reset (or the
// watch cannot tell: then true, and the caller refreshes).
func (w *ownerWatch) exited() bool {
	if w.broken {
		return false
	}
	for _, p := range w.fds {
		if p.Fd < 0 {
			return true
		}
	}
	if len(w.fds) == 0 {
		return false
	}
	for {
		n, err := unix.Poll(w.fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0
	}
}

func (w *ownerWatch) close() {
	for _, p := range w.fds {
		if p.Fd >= 0 {
			unix.Close(int(p.Fd))
		}
	}
	w.fds, w.pids = w.fds[:0], w.pids[:0]
}
