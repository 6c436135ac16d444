package owners

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
	"github.com/bpfleet/bpfleet/test/perfattach"
)

// TestScanFindsPerfEventHolders: the /proc walk finds a program attached
// the legacy way (PERF_EVENT_IOC_SET_BPF, no bpf_link) whose program fd is
// closed: held by nothing but the perf_event fd. The holder is this
// process (via perf_event), and the kernel's answer says what it is
// attached to. A perf event without a program is no holding. A program
// attached through a link, with the perf_event fd cilium/ebpf keeps beside
// it, has this process as its owner once.
func TestScanFindsPerfEventHolders(t *testing.T) {
	legacy, legacyID := loadProg(t, ebpf.TracePoint)
	perf, err := perfattach.Tracepoint(legacy.FD(), "task", "task_rename")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if perf >= 0 {
			unix.Close(perf)
		}
	}()
	legacy.Close() // the perf_event fd alone holds it now
	bare, err := perfattach.Open("task", "task_rename")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bare)

	linked, linkedID := loadProg(t, ebpf.TracePoint)
	l, err := link.Tracepoint("task", "task_rename", linked, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	linked.Close()
	_, infoErr := l.Info()

	s := NewScanner("", nil)
	r, err := s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats %+v in %v", r.Stats, r.Duration)
	self := os.Getpid()

	me := ownerByPID(r.Programs[legacyID], self)
	if me == nil {
		t.Fatalf("test process %d not among the owners %+v of program %d, held by its perf_event fd %d", self, r.Programs[legacyID], legacyID, perf)
	}
	if me.Via != ViaPerfEvent || me.Comm != selfComm(t) {
		t.Errorf("owner %+v: want via %s, comm %q", me, ViaPerfEvent, selfComm(t))
	}
	want := PerfAttachment{PID: self, FD: perf, Known: true,
		Query: bpfsys.TaskFD{ProgID: legacyID, FDType: bpfsys.FDTypeTracepoint, Name: "task_rename"}}
	if got := r.Perf[legacyID]; len(got) != 1 || got[0] != want {
		t.Errorf("perf attachments of program %d: %+v, want [%+v]", legacyID, got, want)
	}
	for id, as := range r.Perf {
		for _, a := range as {
			if a.PID == self && a.FD == bare {
				t.Errorf("a perf event without a program is an attachment of program %d: %+v", id, a)
			}
		}
	}
	if r.Stats.PerfFDs < 2 || r.Stats.PerfProgs < 1 {
		t.Errorf("stats %+v count less than this test's perf_event fds", r.Stats)
	}

	var mine []Owner
	for _, o := range r.Programs[linkedID] {
		if o.PID == self {
			mine = append(mine, o)
		}
	}
	switch {
	case infoErr != nil:
		t.Logf("no perf_event bpf_link on this kernel: %v", infoErr)
		if len(mine) != 1 || mine[0].Via != ViaPerfEvent {
			t.Errorf("owners of the ioctl-attached program %d from this process: %+v, want one via %s", linkedID, mine, ViaPerfEvent)
		}
	case len(mine) != 1 || mine[0].Via != ViaLink:
		t.Errorf("owners of the link-attached program %d from this process: %+v, want one via %s", linkedID, mine, ViaLink)
	}
	if len(r.Perf[linkedID]) != 1 {
		t.Errorf("perf attachments of the link-attached program %d: %+v, want the perf_event fd beside the link", linkedID, r.Perf[linkedID])
	}

	// Detached: the perf_event fd closed, the program is gone with it.
	unix.Close(perf)
	perf = -1
	r, err = s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Programs[legacyID]) != 0 || len(r.Perf[legacyID]) != 0 {
		t.Errorf("program %d, its perf_event fd closed, still has owners %+v, attachments %+v", legacyID, r.Programs[legacyID], r.Perf[legacyID])
	}
}
