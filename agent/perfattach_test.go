package agent

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/test/perfattach"
)

// TestPerfEventAttached: a tracepoint program attached the legacy way
// (PERF_EVENT_IOC_SET_BPF, no bpf_link: every attach before Linux 5.15),
// its program fd closed, is held by this process's perf_event fd alone.
// The scan names this process its owner (via perf_event) and the program
// attached, as its perf_event link would say: attach type tracepoint,
// target task_rename, no link, so no link id or missed counter. A program
// attached through a link, with the perf_event fd cilium/ebpf keeps beside
// it, is listed once, with its link's attachment and this process as its
// owner once. Both owner sources: the task_file iterator and the /proc
// walk; programs read by the kernel's choice of scan source and by
// syscall, which opens each program by id while the first scan's owner
// walk runs (the walk must not count those fds as this process's).
func TestPerfEventAttached(t *testing.T) {
	for _, c := range []struct {
		name   string
		iter   bool
		source string
	}{{"iterator", true, ""}, {"proc", false, ""}, {"iterator-syscall", true, reader.ScanSourceSyscall}, {"proc-syscall", false, reader.ScanSourceSyscall}} {
		t.Run(c.name, func(t *testing.T) { testPerfEventAttached(t, c.iter, c.source) })
	}
}

func testPerfEventAttached(t *testing.T, iter bool, source string) {
	load := func(name string) (*ebpf.Program, uint32) {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.TracePoint, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			t.Skipf("loading a tracepoint program: %v", err)
		}
		return p, scantest.ProgID(t, p)
	}
	legacy, legacyID := load("pe_legacy")
	perf, err := perfattach.Tracepoint(legacy.FD(), "task", "task_rename")
	legacy.Close() // the perf_event fd alone holds it from here
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(perf)

	linked, linkedID := load("pe_link")
	l, err := link.Tracepoint("task", "task_rename", linked, nil)
	linked.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, infoErr := l.Info()
	hasLink := infoErr == nil

	a := newTestAgentWith(t, Config{Owners: true, OwnerIterator: iter, ScanSource: source})
	if iter && a.attr.iterErr != nil {
		t.Skipf("no task_file iterator: %v", a.attr.iterErr)
	}
	self := os.Getpid()
	// Three scans: the first scan's owner refresh, read while the
	// programs are; a refresh for a program loaded since, read after
	// them; a scan that keeps its owners.
	for i := range 3 {
		if i == 1 {
			scantest.LoadPrograms(t, 1)
		}
		s := scan(t, a)
		if i < 2 && !s.Scan.OwnersRefreshed {
			t.Fatalf("scan %d did not read owners", i)
		}
		if source != "" && s.Scan.Source != source {
			t.Fatalf("scan %d read programs by %s, want %s", i, s.Scan.Source, source)
		}
		count := map[uint32]int{}
		for _, p := range s.Programs {
			count[p.ID]++
		}
		for _, id := range []uint32{legacyID, linkedID} {
			if count[id] != 1 {
				t.Errorf("scan %d lists program %d %d times, want once", i, id, count[id])
			}
		}

		p := findProg(s, legacyID)
		if p == nil {
			t.Fatalf("scan %d: program %d missing", i, legacyID)
		}
		if p.AttachType != "tracepoint" || p.AttachTarget != "task_rename" || len(p.Links) != 0 {
			t.Errorf("scan %d: legacy-attached program %d: attach %q target %q, %d links; want tracepoint task_rename, none",
				i, legacyID, p.AttachType, p.AttachTarget, len(p.Links))
		}
		if len(p.Owners) != 1 || p.Owners[0].PID != self || p.Owners[0].Via != owners.ViaPerfEvent {
			t.Errorf("scan %d: owners of program %d: %+v, want pid %d via %s", i, legacyID, p.Owners, self, owners.ViaPerfEvent)
		}

		q := findProg(s, linkedID)
		if q == nil {
			t.Fatalf("scan %d: program %d missing", i, linkedID)
		}
		wantVia, wantLinks := owners.ViaLink, 1
		if !hasLink {
			t.Logf("no perf_event bpf_link on this kernel: %v", infoErr)
			wantVia, wantLinks = owners.ViaPerfEvent, 0
		}
		if q.AttachType != p.AttachType || q.AttachTarget != p.AttachTarget || len(q.Links) != wantLinks {
			t.Errorf("scan %d: link-attached program %d: attach %q target %q, %d links; want %q %q as the legacy one, %d links",
				i, linkedID, q.AttachType, q.AttachTarget, len(q.Links), p.AttachType, p.AttachTarget, wantLinks)
		}
		n := 0
		for _, o := range q.Owners {
			if o.PID == self {
				n++
				if o.Via != wantVia {
					t.Errorf("scan %d: program %d owned by this process via %s, want %s", i, linkedID, o.Via, wantVia)
				}
			}
		}
		if n != 1 {
			t.Errorf("scan %d: this process is %d of program %d's owners %+v, want once", i, n, linkedID, q.Owners)
		}
	}
}
