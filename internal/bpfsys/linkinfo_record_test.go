package bpfsys

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/bpfleet/bpfleet/test/nettest"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// record makes TestRecordLinkInfo attach real links on the running kernel
// and write their bpf_link_info to testdata/linkinfo, the bytes
// TestDecodeLink decodes. As root, serialized with the other tests that
// load BPF programs:
//
//	go test -count=1 -run TestRecordLinkInfo ./internal/bpfsys/ -record
var record = flag.Bool("record", false, "attach real links and record their bpf_link_info into testdata/linkinfo")

// A recorded link is two files: <kind>.bin, the info_len bytes of
// bpf_link_info the kernel filled, and, for a link type with a name,
// <kind>.name: the union offsets of the name buffer's pointer and length
// DecodeLink asked for, then the name the kernel wrote there.
const linkinfoDir = "testdata/linkinfo"

func TestRecordLinkInfo(t *testing.T) {
	if !*record {
		t.Skip("records only with -record")
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	kernel := unix.ByteSliceToString(uts.Release[:])
	var made []string
	keep := func(kind string, l link.Link, err error) {
		t.Helper()
		if err != nil {
			t.Logf("%s: not made on %s: %v", kind, kernel, err)
			return
		}
		defer l.Close()
		if err := recordLink(kind, l); err != nil {
			t.Errorf("%s: %v", kind, err)
			return
		}
		made = append(made, kind)
	}
	load := func(typ ebpf.ProgramType, at ebpf.AttachType, to string, ret int32) *ebpf.Program {
		t.Helper()
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: typ, AttachType: at, AttachTo: to, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()}})
		if err != nil {
			t.Fatalf("loading %v program: %v", typ, err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}

	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_hang", Program: load(ebpf.RawTracepoint, 0, "", 0)})
	keep("raw_tracepoint", l, err)
	// tp_btf is a raw_tracepoint link too: recorded to show it.
	l, err = link.AttachTracing(link.TracingOptions{Program: load(ebpf.Tracing, ebpf.AttachTraceRawTp, "sched_process_hang", 0)})
	keep("raw_tracepoint_tp_btf", l, err)
	if p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "bpf_fentry_test1", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}); err == nil {
		l, err = link.AttachTracing(link.TracingOptions{Program: p})
		keep("tracing", l, err)
		p.Close()
	} else {
		keep("tracing", nil, err)
	}
	l, err = link.AttachIter(link.IterOptions{Program: load(ebpf.Tracing, ebpf.AttachTraceIter, "bpf_map", 0)})
	keep("iter", l, err)
	l, err = link.Tracepoint("sched", "sched_process_hang", load(ebpf.TracePoint, 0, "", 0), nil)
	keep("perf_event_tracepoint", l, err)

	// A perf_event link on a software event (BPF_PERF_EVENT_EVENT).
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Sample: 1 << 40, Bits: unix.PerfBitDisabled}
	attr.Size = uint32(unsafe.Sizeof(attr))
	if fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC); err == nil {
		l, err = link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: load(ebpf.PerfEvent, 0, "", 0), Attach: ebpf.AttachPerfEvent})
		keep("perf_event_event", l, err)
		unix.Close(fd)
	} else {
		keep("perf_event_event", nil, err)
	}

	// Probes on libc's getpid, which nothing here calls.
	if ex, err := link.OpenExecutable("/usr/lib/x86_64-linux-gnu/libc.so.6"); err == nil {
		l, err = ex.Uprobe("getpid", load(ebpf.Kprobe, 0, "", 0), nil)
		keep("perf_event_uprobe", l, err)
		l, err = ex.Uretprobe("getpid", load(ebpf.Kprobe, 0, "", 0), nil)
		keep("perf_event_uretprobe", l, err)
		l, err = ex.UprobeMulti([]string{"getpid"}, load(ebpf.Kprobe, ebpf.AttachTraceUprobeMulti, "", 0), nil)
		keep("uprobe_multi", l, err)
		l, err = ex.UretprobeMulti([]string{"getpid", "getppid"}, load(ebpf.Kprobe, ebpf.AttachTraceUprobeMulti, "", 0), nil)
		keep("uprobe_multi_return", l, err)
	} else {
		t.Logf("no libc to probe: %v", err)
	}

	// A cgroup link on a new empty cgroup.
	cg := filepath.Join(cgroup2Mount(), fmt.Sprintf("bpfleet-linkinfo-%d", os.Getpid()))
	if !filepath.IsAbs(cg) {
		keep("cgroup", nil, errors.New("no cgroup2 mount"))
	} else if err := os.Mkdir(cg, 0o755); err == nil {
		l, err = link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupInetEgress, Program: load(ebpf.CGroupSKB, ebpf.AttachCGroupInetEgress, "", 1)})
		keep("cgroup", l, err)
		os.Remove(cg)
	} else {
		keep("cgroup", nil, err)
	}

	// A sockmap link on a new sockmap.
	if m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockMap, KeySize: 4, ValueSize: 4, MaxEntries: 1}); err == nil {
		l, err = link.AttachRawLink(link.RawLinkOptions{Target: m.FD(), Program: load(ebpf.SkSKB, ebpf.AttachSkSKBStreamVerdict, "", 1), Attach: ebpf.AttachSkSKBStreamVerdict})
		keep("sockmap", l, err)
		m.Close()
	} else {
		keep("sockmap", nil, err)
	}

	// Network links go to a fresh network namespace, off the host's
	// traffic: its loopback is ifindex 1.
	xdp := load(ebpf.XDP, ebpf.AttachXDP, "", 2)             // XDP_PASS
	tcx := load(ebpf.SchedCLS, ebpf.AttachTCXEgress, "", -1) // TCX_NEXT
	skl := load(ebpf.SkLookup, ebpf.AttachSkLookup, "", 1)   // SK_PASS
	nf := load(ebpf.Netfilter, ebpf.AttachNetfilter, "", 1)  // NF_ACCEPT
	err = nettest.InFreshNetns(func(ns int) {
		l, err := link.AttachXDP(link.XDPOptions{Program: xdp, Interface: 1})
		keep("xdp", l, err)
		l, err = link.AttachTCX(link.TCXOptions{Program: tcx, Interface: 1, Attach: ebpf.AttachTCXEgress})
		keep("tcx", l, err)
		l, err = link.AttachNetNs(ns, skl)
		keep("netns", l, err)
		l, err = link.AttachNetfilter(link.NetfilterOptions{Program: nf, ProtocolFamily: link.NetfilterProtoIPv6, Hook: link.NetfilterInetLocalOut, Priority: -123})
		keep("netfilter", l, err)
	})
	if err != nil {
		t.Error(err)
	}

	readme := "Link info recorded from a real kernel by TestRecordLinkInfo (linkinfo_record_test.go):\n" +
		"kernel " + kernel + " (" + runtime.GOARCH + "), recorded with\n" +
		"  go test -count=1 -run TestRecordLinkInfo ./internal/bpfsys/ -record (as root)\n" +
		"Kinds: " + strings.Join(made, " ") + "\n" +
		"<kind>.bin holds the info_len bytes the kernel filled; <kind>.name the name\n" +
		"buffer's pointer and length offsets, then the name the kernel wrote there.\n"
	if err := os.WriteFile(filepath.Join(linkinfoDir, "RECORDED"), []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordLink writes l's bpf_link_info, read as a scan reads it (by id,
// then OBJ_GET_INFO, then again with a name buffer where DecodeLink asks
// for a name).
func recordLink(kind string, l link.Link) error {
	li, err := l.Info()
	if err != nil {
		return err
	}
	fd, err := FDByID(CmdLinkGetFDByID, uint32(li.ID))
	if err != nil {
		return err
	}
	defer CloseFD(fd)
	var info LinkInfo
	n, err := ObjInfo(fd, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)))
	if err != nil {
		return err
	}
	var named string
	var nameErr error
	DecodeLink(&info, n, func(ptrOff, lenOff int) string {
		buf := make([]byte, 512)
		var ni LinkInfo
		ni.SetU64(ptrOff, uint64(uintptr(unsafe.Pointer(&buf[0]))))
		ni.SetU32(lenOff, uint32(len(buf)))
		if _, err := ObjInfo(fd, unsafe.Pointer(&ni), uint32(unsafe.Sizeof(ni))); err != nil {
			nameErr = err
			return ""
		}
		named = fmt.Sprintf("%d %d\n%s", ptrOff, lenOff, unix.ByteSliceToString(buf))
		return ""
	})
	if nameErr != nil {
		return fmt.Errorf("reading the name: %w", nameErr)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&info)), n)
	if err := os.WriteFile(filepath.Join(linkinfoDir, kind+".bin"), raw, 0o644); err != nil {
		return err
	}
	if named != "" {
		return os.WriteFile(filepath.Join(linkinfoDir, kind+".name"), []byte(named), 0o644)
	}
	return nil
}

// cgroup2Mount is where cgroup2 is mounted ("" for nowhere, and the cgroup
// link is not made).
func cgroup2Mount() string {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}
