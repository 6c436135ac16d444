package bpfsys

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/test/perfattach"
)

// TestDecodeTaskFD: the kernel's answer as the owner walk reads it: the
// name up to its NUL or to the length the kernel gave, whichever comes
// first, and each fd type as the perf_event link kind of the same probe.
func TestDecodeTaskFD(t *testing.T) {
	buf := func(s string, size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = 'x' // what a reused buffer may hold past the name
		}
		copy(b, s)
		if len(s) < size {
			b[len(s)] = 0
		}
		return b
	}
	for _, tc := range []struct {
		name string
		attr TaskFDQueryAttr
		b    []byte
		want TaskFD
	}{
		{"tracepoint", TaskFDQueryAttr{BufLen: 11, ProgID: 7, FDType: FDTypeTracepoint}, buf("task_rename", 32),
			TaskFD{ProgID: 7, FDType: FDTypeTracepoint, Name: "task_rename"}},
		{"kprobe with offset", TaskFDQueryAttr{BufLen: 20, ProgID: 8, FDType: FDTypeKprobe, ProbeOffset: 4}, buf("htab_map_update_elem", 64),
			TaskFD{ProgID: 8, FDType: FDTypeKprobe, Name: "htab_map_update_elem", Offset: 4}},
		{"kprobe by address", TaskFDQueryAttr{BufLen: 0, ProgID: 9, FDType: FDTypeKretprobe, ProbeAddr: 0xffffffff81000000}, buf("", 16),
			TaskFD{ProgID: 9, FDType: FDTypeKretprobe, Addr: 0xffffffff81000000}},
		{"uprobe", TaskFDQueryAttr{BufLen: 9, ProgID: 10, FDType: FDTypeUprobe, ProbeOffset: 0x1234}, buf("/bin/bash", 16),
			TaskFD{ProgID: 10, FDType: FDTypeUprobe, Name: "/bin/bash", Offset: 0x1234}},
		// ENOSPC: the kernel wrote len(b)-1 bytes and a NUL, BufLen the
		// whole length.
		{"cut", TaskFDQueryAttr{BufLen: 20, ProgID: 11, FDType: FDTypeKprobe}, buf("htab_ma", 8),
			TaskFD{ProgID: 11, FDType: FDTypeKprobe, Name: "htab_ma"}},
		{"length shorter than the buffer's bytes", TaskFDQueryAttr{BufLen: 3, FDType: FDTypeTracepoint}, []byte("abcdef"),
			TaskFD{FDType: FDTypeTracepoint, Name: "abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeTaskFD(&tc.attr, tc.b); got != tc.want {
				t.Errorf("decodeTaskFD = %+v, want %+v", got, tc.want)
			}
		})
	}
	for fdType, want := range map[uint32]uint32{
		FDTypeRawTracepoint: 0, FDTypeTracepoint: PerfEventTracepoint, FDTypeKprobe: PerfEventKprobe,
		FDTypeKretprobe: PerfEventKretprobe, FDTypeUprobe: PerfEventUprobe, FDTypeUretprobe: PerfEventUretprobe, 6: 0,
	} {
		q := TaskFD{FDType: fdType}
		if got := q.PerfEventType(); got != want {
			t.Errorf("fd type %d: perf_event link kind %d, want %d", fdType, got, want)
		}
	}
	if got := unsafe.Sizeof(TaskFDQueryAttr{}); got != 48 {
		t.Errorf("TaskFDQueryAttr is %d bytes, the uapi's task_fd_query 48", got)
	}
}

// TestTaskFDQuery asks the running kernel about this process's own fds: a
// tracepoint program attached the legacy way (PERF_EVENT_IOC_SET_BPF, no
// bpf_link), a perf event without a program, and a file that is no perf
// event at all.
func TestTaskFDQuery(t *testing.T) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tfq_tp", Type: ebpf.TracePoint, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Skipf("loading a tracepoint program: %v", err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	perf, err := perfattach.Tracepoint(prog.FD(), "task", "task_rename")
	if err != nil {
		t.Skipf("attaching the legacy way: %v", err)
	}
	defer unix.Close(perf)
	pid := os.Getpid()

	// A buffer too small for the name: the kernel says ENOSPC and how
	// long the name is, and the query asks again.
	small := make([]byte, 4)
	q, err := TaskFDQuery(pid, perf, &small)
	if err != nil {
		t.Fatalf("query of the attached perf event: %v", err)
	}
	want := TaskFD{ProgID: uint32(id), FDType: FDTypeTracepoint, Name: "task_rename"}
	if q != want {
		t.Errorf("query of the attached perf event = %+v, want %+v", q, want)
	}

	bare, err := perfattach.Open("task", "task_rename")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bare)
	var buf []byte
	if _, err := TaskFDQuery(pid, bare, &buf); !errors.Is(err, unix.ENOENT) {
		t.Errorf("query of a perf event without a program: %v, want ENOENT", err)
	}
	if _, err := TaskFDQuery(pid, prog.FD(), &buf); !errors.Is(err, ebpf.ErrNotSupported) {
		t.Errorf("query of a program fd: %v, want not supported", err)
	}
	if _, err := TaskFDQuery(pid, 1<<20, &buf); !errors.Is(err, unix.EBADF) {
		t.Errorf("query of an fd not open: %v, want EBADF", err)
	}
}
