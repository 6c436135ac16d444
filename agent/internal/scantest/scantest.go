// Package scantest holds what the agent's and the reader's tests and
// benchmarks share: trivial programs to load and their ids, and the
// floors a scan is timed against (the raw syscalls any tool needs, the
// empty iterator walk). Only tests import it.
package scantest

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ProgID is p's id, as the kernel numbers it.
func ProgID(t testing.TB, p *ebpf.Program) uint32 {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel gives no program id")
	}
	return uint32(id)
}

// SocketFilterSpec is a trivial socket filter, the cheapest program to load.
func SocketFilterSpec() *ebpf.ProgramSpec {
	return &ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "MIT",
		Instructions: asm.Instructions{
			asm.LoadImm(asm.R0, 0, asm.DWord),
			asm.Return(),
		},
	}
}

// LoadPrograms loads n trivial socket filters so that a scan has n more
// programs to read.
func LoadPrograms(tb testing.TB, n int) []*ebpf.Program {
	tb.Helper()
	spec := SocketFilterSpec()
	progs := make([]*ebpf.Program, 0, n)
	for i := 0; i < n; i++ {
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			tb.Fatalf("loading program %d of %d: %v", i, n, err)
		}
		progs = append(progs, p)
	}
	tb.Cleanup(func() {
		for _, p := range progs {
			p.Close()
		}
	})
	return progs
}

// rawFloor is the least any tool can do to read every program: the same
// syscalls per program, with no decoding and no caching. Counters alone
// are GET_NEXT_ID, GET_FD_BY_ID, GET_INFO and close (4); a first read, as
// bpftool prog show does it, also asks for map ids and reads the fdinfo
// for memlock (open, read, close: 7).
func rawFloor(first bool) int {
	var info bpfsys.ProgInfo
	maps := make([]uint32, 64)
	buf := make([]byte, 512)
	var id uint32
	n := 0
	for {
		next, ok, err := bpfsys.NextID(bpfsys.CmdProgGetNextID, id)
		if err != nil || !ok {
			return n
		}
		id = next
		fd, err := bpfsys.FDByID(bpfsys.CmdProgGetFDByID, id)
		if err != nil {
			continue
		}
		info = bpfsys.ProgInfo{}
		if first {
			info.NrMapIDs, info.MapIDs = uint32(len(maps)), uint64(uintptr(unsafe.Pointer(&maps[0])))
		}
		bpfsys.ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)))
		if first {
			if f, err := unix.Open("/proc/self/fdinfo/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				unix.Read(f, buf)
				unix.Close(f)
			}
		}
		unix.Close(fd)
		n++
	}
}

// emptyWalk is the least any iterator design can cost: an iter/bpf_prog
// program that writes nothing (mov r0, 0; exit), read to its end. What a
// scan from the iterator costs above it is our BPF program and our Go.
type emptyWalk struct {
	prog *ebpf.Program
	it   *link.Iter
	buf  []byte
}

// newEmptyWalk loads the empty iterator, or returns nil with the kernel's
// reason when it refuses one (then the walk metrics are not reported).
func newEmptyWalk(tb testing.TB) (*emptyWalk, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:       ebpf.Tracing,
		AttachType: ebpf.AttachTraceIter,
		AttachTo:   "bpf_prog",
		License:    "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("loading the empty bpf_prog iterator: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attaching the empty bpf_prog iterator: %w", err)
	}
	w := &emptyWalk{prog: prog, it: it, buf: make([]byte, 4096)}
	tb.Cleanup(func() { w.it.Close(); w.prog.Close() })
	return w, nil
}

// walk reads the empty iterator once: one read() walks every program.
func (w *emptyWalk) walk(tb testing.TB) {
	rd, err := w.it.Open()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		n, err := rd.Read(w.buf)
		if n == 0 || err != nil {
			break
		}
	}
	rd.Close()
}

// BenchAgainstFloor times scan, rawFloor(first) and, where the kernel
// loads one, the empty iterator walk alternately in every iteration, so
// that drift on a shared machine hits all alike, and reports each one's
// ns/prog, the scan's ratio to the floor (x-floor) and to the walk
// (x-walk), the walk's own ratio to the floor (walk-x-floor) and the
// scan's syscalls per program. scan returns how many programs it read.
func BenchAgainstFloor(b *testing.B, first bool, scan func() int) {
	var tFloor, tScan, tWalk time.Duration
	var calls uint64
	progs := 0
	w, werr := newEmptyWalk(b)
	if werr != nil {
		b.Logf("no walk metrics: %v", werr)
	}
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		rawFloor(first)
		t1 := time.Now()
		c0 := bpfsys.SyscallCount.Load()
		progs = scan()
		t2 := time.Now()
		calls += bpfsys.SyscallCount.Load() - c0
		if w != nil {
			w.walk(b)
			tWalk += time.Since(t2)
		}
		tScan += t2.Sub(t1)
		tFloor += t1.Sub(t0)
	}
	perProg := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / float64(progs) }
	b.ReportMetric(perProg(tFloor), "floor-ns/prog")
	b.ReportMetric(perProg(tScan), "ns/prog")
	b.ReportMetric(float64(tScan)/float64(tFloor), "x-floor")
	if w != nil {
		b.ReportMetric(perProg(tWalk), "walk-ns/prog")
		b.ReportMetric(float64(tWalk)/float64(tFloor), "walk-x-floor")
		b.ReportMetric(float64(tScan)/float64(tWalk), "x-walk")
	}
	b.ReportMetric(float64(calls)/float64(b.N)/float64(progs), "syscalls/prog")
}

// staticFields are the Program fields set once per program id, never by a
// scan.
var staticFields = map[string]bool{"ID": true, "Name": true, "Tag": true, "Type": true, "LoadTime": true, "UID": true,
	"MapIDs": true, "BTFID": true, "JitedSize": true, "XlatedSize": true, "Memlock": true, "VerifiedInsns": true}

// EachDynamicChange calls check with a fresh copy of a Program (from
// fresh) in which one field that is not static was changed, field by
// field; a field of a kind it cannot change fails the test.
func EachDynamicChange(t *testing.T, fresh func() prog.Program, check func(name string, p prog.Program)) {
	t.Helper()
	typ := reflect.TypeFor[prog.Program]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if staticFields[f.Name] {
			continue
		}
		p := fresh()
		v := reflect.ValueOf(&p).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("changed")
		case reflect.Uint64, reflect.Uint32:
			v.SetUint(99)
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(f.Type, 2, 2))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", f.Name, v.Kind())
		}
		check(f.Name, p)
	}
}
