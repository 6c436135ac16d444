package taskfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/probes/internal/iterpin"
	"github.com/cilium/ebpf"
)

// TestPinnedTaskFile: the iterator the agent pins reads, for a program this
// process holds, the same entry as one loaded here; the agent's Close
// removes the pin and a reader then says none is pinned.
func TestPinnedTaskFile(t *testing.T) {
	if err := iterpin.CheckBPFFS("/sys/fs/bpf"); err != nil {
		t.Skipf("no bpffs to pin in: %v", err)
	}
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("bpfleet-test-%d-%s", os.Getpid(), t.Name()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "tf_pinned", Type: ebpf.SocketFilter, License: "GPL", Instructions: returnZero})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	id := progID(t, p)

	pub, err := Publish(dir, "")
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel refuses iter/task_file: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := OpenPinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	held := func(it *Iter) []Entry {
		var got []Entry
		if err := it.Read(func(e Entry) {
			if e.ProgID == id && e.Kind == KindProg {
				got = append(got, e)
			}
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got, want := held(pinned), held(loadIter(t, false))
	if len(want) != 1 || want[0].PID != uint32(os.Getpid()) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holders of %d: from the pin %v, loaded here %v (want this process, pid %d)", id, got, want, os.Getpid())
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPinned(dir); err == nil || !strings.Contains(err.Error(), "no iterator pinned at") {
		t.Errorf("after the agent's Close: %v, want no iterator pinned", err)
	}
}
