// Package bpfevents watches BPF program loads and unloads through perf
// side-band records (PERF_RECORD_BPF_EVENT), so that a reader can tell,
// without a syscall, that the set of programs has not changed since it last
// walked them.
//
// One software dummy event (PERF_COUNT_SW_DUMMY, attr.bpf_event = 1) is
// opened per CPU (pid -1): the kernel writes the record into the ring of
// the event bound to the CPU the load or unload ran on
// (perf_event_bpf_event → perf_iterate_sb → this CPU's side-band list), so
// every possible CPU needs its own event. A drain reads data_head and
// stores data_tail in each ring's mmapped control page: no syscall at all
// when nothing happened.
//
// What the kernel guarantees, read in kernel/bpf/syscall.c and
// kernel/events/core.c (Linux 6.1 and current mainline):
//   - bpf_prog_load() allocates the id (bpf_prog_alloc_id), then emits
//     PERF_BPF_EVENT_PROG_LOAD, then hands out the fd; a load that fails
//     after that puts the program, which emits PROG_UNLOAD.
//   - The last bpf_prog_put() emits PERF_BPF_EVENT_PROG_UNLOAD in
//     bpf_prog_put_deferred() (on 6.1 after __bpf_prog_put's
//     bpf_prog_free_id(); current kernels free the id right after the
//     record, in the same function), then
//     __bpf_prog_put_noref(prog, true) frees the program, prog->stats
//     included, only after an RCU grace period (call_rcu, or
//     call_rcu_tasks_trace for a sleepable program). So a program whose
//     memory is gone had its UNLOAD record written first: a reader that
//     drains after reading a program's memory sees the UNLOAD of every
//     program freed before or during that read.
//   - perf_iterate_sb_cpu() skips an event whose state is below INACTIVE.
//     Taking a CPU offline removes its events (perf_event_exit_cpu_context,
//     DETACH_GROUP: state OFF) and bringing it back does not re-enable
//     them: records of that CPU are lost from then on, without a LOST
//     record. So Open requires every possible CPU online, and
//     CPUsChanged (one pread of the online CPU list) tells a caller that
//     one went offline since. Not covered: a CPU taken offline and brought
//     back between two checks (reading the events' state would need the
//     perf_event in a BPF program; a syscall program, which must be
//     sleepable, may not use a PERF_EVENT_ARRAY).
//   - A record that does not fit in the ring is dropped and counted; the
//     next record written once there is room again is PERF_RECORD_LOST.
//     Drain reports it, and a full ring, as lost: the caller must resync.
package bpfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kind is what happened to a program.
type Kind uint16

const (
	// Load is PERF_BPF_EVENT_PROG_LOAD.
	Load Kind = 1
	// Unload is PERF_BPF_EVENT_PROG_UNLOAD.
	Unload Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Load:
		return "load"
	case Unload:
		return "unload"
	}
	return "kind " + strconv.Itoa(int(k))
}

// Event is one program load or unload.
type Event struct {
	Kind Kind
	ID   uint32
	Tag  [8]byte
}

// Record types and sizes (include/uapi/linux/perf_event.h).
const (
	recordLost     = 2  // PERF_RECORD_LOST: u64 id, u64 lost
	recordBPFEvent = 18 // PERF_RECORD_BPF_EVENT: u16 type, u16 flags, u32 id, u8 tag[8]
	headerSize     = 8  // u32 type, u16 misc, u16 size
	bpfEventSize   = headerSize + 16
	attrBPFEvent   = 1 << 30 // perf_event_attr.bpf_event
	// dataPages is each ring's size in pages (a power of two): 32 KiB
	// holds ~1,300 records between two drains before the kernel drops.
	dataPages = 8
)

// ring is one CPU's mmapped ring.
type ring struct {
	fd   int
	mem  []byte
	page *unix.PerfEventMmapPage
	data []byte
}

// Watcher holds one event and ring per possible CPU. Not safe for
// concurrent use.
type Watcher struct {
	rings   []ring
	scratch []byte
	// online is /sys/devices/system/cpu/online, held open, and its
	// contents at Open.
	online     int
	onlineAt   []byte
	onlineRead []byte
}

const onlinePath = "/sys/devices/system/cpu/online"

// Open opens an event and ring on each of cpus CPUs (0..cpus-1: pass the
// number of possible CPUs). Every one of them must be online: an event
// opened now on an offline CPU would never be enabled, and the loads and
// unloads run there later would be missed.
func Open(cpus int) (*Watcher, error) {
	if cpus <= 0 {
		return nil, fmt.Errorf("watching BPF events: %d CPUs", cpus)
	}
	fd, err := unix.Open(onlinePath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", onlinePath, err)
	}
	w := &Watcher{scratch: make([]byte, 0, 64), online: fd, onlineRead: make([]byte, 4096)}
	n, err := unix.Pread(fd, w.onlineRead, 0)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("reading online CPUs: %w", err)
	}
	b := w.onlineRead[:n]
	w.onlineAt = append([]byte(nil), b...)
	online, err := parseCPUList(string(b))
	if err != nil {
		w.Close()
		return nil, err
	}
	for c := range cpus {
		if !online[c] {
			w.Close()
			return nil, fmt.Errorf("CPU %d is offline: its BPF program loads and unloads could not be watched (bring every possible CPU online)", c)
		}
	}
	for c := range cpus {
		r, err := openRing(c)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.rings = append(w.rings, r)
	}
	return w, nil
}

func openRing(cpu int) (ring, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_DUMMY,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   attrBPFEvent,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return ring{}, fmt.Errorf("opening the BPF event watcher on CPU %d (perf_event_open: needs CAP_PERFMON or CAP_SYS_ADMIN): %w", cpu, err)
	}
	pg := os.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+dataPages)*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return ring{}, fmt.Errorf("mapping the BPF event ring of CPU %d: %w", cpu, err)
	}
	page := (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := page.Data_offset, page.Data_size
	if off == 0 || size == 0 { // kernels before 4.1 leave them zero
		off, size = uint64(pg), uint64(dataPages*pg)
	}
	return ring{fd: fd, mem: mem, page: page, data: mem[off : off+size]}, nil
}

// FDs are the events' fds, one per CPU in CPU order, for a caller that
// checks their state in the kernel (probes/statstable). They stay the
// Watcher's.
func (w *Watcher) FDs() []int {
	fds := make([]int, len(w.rings))
	for i := range w.rings {
		fds[i] = w.rings[i].fd
	}
	return fds
}

// Drain consumes every record written since the last drain and returns
// dst with its loads and unloads appended, and lost true when the kernel
// dropped records (or a record made no sense): then the caller must assume
// anything happened. It makes no syscall.
func (w *Watcher) Drain(dst []Event) ([]Event, bool) {
	lost := false
	for i := range w.rings {
		r := &w.rings[i]
		head := atomic.LoadUint64(&r.page.Data_head) // pairs with the kernel's smp_store_release
		tail := r.page.Data_tail
		if head == tail {
			continue
		}
		var l bool
		dst, w.scratch, l = parse(r.data, tail, head, dst, w.scratch)
		lost = lost || l
		atomic.StoreUint64(&r.page.Data_tail, head) // the kernel may overwrite what we read
	}
	return dst, lost
}

// parse decodes the records of ring data between tail and head (free-running
// byte counters, as in the control page), appending loads and unloads to dst;
// lost is true for a PERF_RECORD_LOST or a record that cannot be right. A
// record that wraps at the ring's end is put together in scratch.
func parse(data []byte, tail, head uint64, dst []Event, scratch []byte) ([]Event, []byte, bool) {
	size := uint64(len(data))
	if size == 0 || head-tail > size {
		return dst, scratch, true
	}
	// A ring without room for one more record may have dropped some: the
	// kernel writes the LOST record only once there is room again, which
	// is after this drain.
	lost := size-(head-tail) < 2*bpfEventSize
	le := binary.LittleEndian
	for tail < head {
		if head-tail < headerSize {
			return dst, scratch, true
		}
		rec, sc := at(data, tail, headerSize, scratch)
		scratch = sc
		typ, n := le.Uint32(rec), uint64(le.Uint16(rec[6:]))
		if n < headerSize || n > head-tail {
			return dst, scratch, true
		}
		rec, scratch = at(data, tail, n, scratch)
		switch typ {
		case recordLost:
			lost = true
		case recordBPFEvent:
			if n < bpfEventSize {
				return dst, scratch, true
			}
			ev := Event{Kind: Kind(le.Uint16(rec[8:])), ID: le.Uint32(rec[12:])}
			copy(ev.Tag[:], rec[16:24])
			if ev.Kind == Load || ev.Kind == Unload {
				dst = append(dst, ev)
			}
		}
		tail += n
	}
	return dst, scratch, lost
}

// at returns the n bytes of the ring at byte counter pos: in place, or
// copied into scratch when they wrap at the ring's end.
func at(data []byte, pos, n uint64, scratch []byte) ([]byte, []byte) {
	size := uint64(len(data))
	off := pos & (size - 1)
	if off+n <= size {
		return data[off : off+n], scratch
	}
	scratch = append(scratch[:0], data[off:]...)
	scratch = append(scratch, data[:n-(size-off)]...)
	return scratch, scratch
}

// CPUsChanged says whether the online CPUs differ from those at Open
// (one pread): a CPU taken offline stops its event for good, so the
// watcher is no longer to be trusted. An unreadable list counts as changed.
func (w *Watcher) CPUsChanged() bool {
	n, err := unix.Pread(w.online, w.onlineRead, 0)
	return err != nil || string(w.onlineRead[:n]) != string(w.onlineAt)
}

// Close unmaps the rings and closes the events.
func (w *Watcher) Close() error {
	var errs []error
	if w.online > 0 {
		errs = append(errs, unix.Close(w.online))
		w.online = -1
	}
	for _, r := range w.rings {
		errs = append(errs, unix.Munmap(r.mem), unix.Close(r.fd))
	}
	w.rings = nil
	return errors.Join(errs...)
}

// parseCPUList parses a kernel CPU list ("0-3,5") into a set.
func parseCPUList(s string) (map[int]bool, error) {
	out := map[int]bool{}
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
		}
		if b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("CPU list %q: bad range %s", s, part)
		}
		for c := a; c <= b; c++ {
			out[c] = true
		}
	}
	return out, nil
}
