package misswatch

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfContextMax: callchain entries at or above it (as unsigned) are
// perf's context markers (PERF_CONTEXT_KERNEL, ...), not frames.
const perfContextMax = ^uint64(4095 - 1) // (u64)-4095

// read consumes the event's ring buffer: each sample is decoded and
// passed to fn; it returns the samples seen and the writes the kernel
// reported lost.
func (ev *event) read(fn func(Sample), maxStack int) (n int, lost uint64) {
	meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&ev.mem[0]))
	head := atomic.LoadUint64(&meta.Data_head)
	tail := meta.Data_tail
	off, size := meta.Data_offset, meta.Data_size
	if off == 0 { // kernels before 4.1 leave them 0: the data follows the page
		off, size = uint64(len(ev.mem))/(1+ringPages), uint64(len(ev.mem))/(1+ringPages)*ringPages
	}
	data := ev.mem[off : off+size]
	var rec []byte
	for tail < head {
		hdr := ringBytes(data, tail, 8, &rec)
		typ := binary.LittleEndian.Uint32(hdr)
		sz := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if sz < 8 || tail+sz > head {
			break // never written whole: drop the rest
		}
		body := ringBytes(data, tail+8, sz-8, &rec)
		switch typ {
		case unix.PERF_RECORD_SAMPLE:
			if s, ok := decodeSample(body, maxStack); ok {
				fn(s)
				n++
			}
		case unix.PERF_RECORD_LOST:
			if len(body) >= 16 {
				lost += binary.LittleEndian.Uint64(body[8:])
			}
		}
		tail += sz
	}
	atomic.StoreUint64(&meta.Data_tail, head)
	return n, lost
}

// ringBytes returns n bytes of the ring at position pos, copied into *buf
// where they wrap around its end.
func ringBytes(data []byte, pos, n uint64, buf *[]byte) []byte {
	size := uint64(len(data))
	start := pos % size
	if start+n <= size {
		return data[start : start+n]
	}
	b := append((*buf)[:0], data[start:]...)
	b = append(b, data[:n-(size-start)]...)
	*buf = b
	return b
}

// decodeSample decodes a PERF_RECORD_SAMPLE body of sampleType: ip; pid,
// tid; time; cpu, res; nr, ips[nr]. The sample's Time holds the raw
// CLOCK_MONOTONIC nanoseconds (Drain makes it wall time).
func decodeSample(b []byte, maxStack int) (Sample, bool) {
	const fixed = 8 + 8 + 8 + 8 + 8
	if len(b) < fixed {
		return Sample{}, false
	}
	le := binary.LittleEndian
	s := Sample{
		PID:  int(le.Uint32(b[8:])),
		TID:  int(le.Uint32(b[12:])),
		Time: time.Unix(0, int64(le.Uint64(b[16:]))),
		CPU:  int(le.Uint32(b[24:])),
	}
	nr := le.Uint64(b[32:])
	ips := b[fixed:]
	if nr > uint64(len(ips)/8) {
		return Sample{}, false
	}
	s.Stack = make([]uint64, 0, min(int(nr), maxStack))
	for i := range int(nr) {
		ip := le.Uint64(ips[8*i:])
		if ip >= perfContextMax {
			continue
		}
		if len(s.Stack) == maxStack {
			break
		}
		s.Stack = append(s.Stack, ip)
	}
	if len(s.Stack) == 0 {
		s.Stack = append(s.Stack, le.Uint64(b))
	}
	// The kernel stops at the cap: a stack that reaches it may go on.
	s.Truncated = len(s.Stack) == maxStack
	return s, true
}
