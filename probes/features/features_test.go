package features

import (
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// observe does, in the test itself, what the report claims to have done:
// load, attach and fire the probe for t. It returns nil if the probe counted
// its calls, else the kernel's one-line reason.
func observe(t *testing.T, typ catalog.AttachType, m catalog.Mode) (ok bool, reason string) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	trig, err := catalog.NewTrigger(typ, m, 10)
	if err != nil {
		return false, catalog.Reason(err)
	}
	defer trig.Close()
	p, err := catalog.Load(typ, m, unix.Gettid())
	if err != nil {
		return false, catalog.Reason(err)
	}
	defer p.Close()
	if err := p.Attach(); err != nil {
		return false, catalog.Reason(err)
	}
	calls, err := trig.Fire(20)
	if err != nil {
		t.Fatal(err)
	}
	hits, err := p.Hits()
	if err != nil {
		t.Fatal(err)
	}
	return hits == uint64(calls), "run: counted wrong"
}

func TestReportMatchesWhatTheKernelSays(t *testing.T) {
	r := Probe()
	if len(r.AttachTypes) != len(catalog.All()) {
		t.Fatalf("report has %d attach types, catalog %d", len(r.AttachTypes), len(catalog.All()))
	}
	for _, a := range r.AttachTypes {
		typ := catalog.AttachType(a.AttachType)
		for _, c := range []struct {
			m         catalog.Mode
			supported bool
			reason    string
			incon     bool
		}{
			{catalog.Syscall, a.Supported, a.Reason, a.Inconclusive},
			{catalog.Kernel, a.KernelMode.Supported, a.KernelMode.Reason, a.KernelMode.Inconclusive},
		} {
			ok, reason := observe(t, typ, c.m)
			if c.supported != ok {
				t.Errorf("%s (%s): report says supported=%v, the kernel here says %v (%s)", typ, c.m, c.supported, ok, reason)
				continue
			}
			if ok {
				if c.reason != "" {
					t.Errorf("%s (%s) supported but with reason %q", typ, c.m, c.reason)
				}
				continue
			}
			if c.incon {
				t.Errorf("%s (%s): inconclusive (%s) though running as root", typ, c.m, c.reason)
			}
			if c.reason != reason {
				t.Errorf("%s (%s): report's reason %q, the kernel said %q", typ, c.m, c.reason, reason)
			}
			t.Logf("%s (%s): unsupported: %s", typ, c.m, c.reason)
		}
	}
}

// The trampoline family's refusal must carry the kernel's errno, not a guess.
func TestTrampolineRefusalNamesErrno(t *testing.T) {
	for _, typ := range []catalog.AttachType{catalog.Fentry, catalog.Fexit, catalog.FmodRet, catalog.FentryS} {
		err := HaveAttachType(typ, catalog.Syscall)
		if err == nil {
			t.Logf("%s loads on this kernel", typ)
			continue
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			t.Errorf("%s: refusal %v does not wrap ErrNotSupported", typ, err)
		}
		_, lerr := catalog.Load(typ, catalog.Syscall, unix.Gettid())
		var errno unix.Errno
		if errors.As(lerr, &errno) && Reason(err) != "load: "+errno.Error() {
			t.Errorf("%s: reason %q, kernel's errno at load %q", typ, Reason(err), errno.Error())
		}
	}
}

func TestCached(t *testing.T) {
	a, b := HaveAttachType(catalog.RawTp, catalog.Syscall), HaveAttachType(catalog.RawTp, catalog.Syscall)
	if a != b {
		t.Errorf("second answer %v differs from first %v", b, a)
	}
}

func TestReportJSONFields(t *testing.T) {
	b, err := json.Marshal(Probe())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Kernel      map[string]any   `json:"kernel"`
		Features    []map[string]any `json:"features"`
		AttachTypes []map[string]any `json:"attach_types"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"release", "arch", "cpu_model"} {
		if s, _ := got.Kernel[k].(string); s == "" {
			t.Errorf("kernel.%s missing in %s", k, b)
		}
	}
	for _, a := range got.AttachTypes {
		if _, ok := a["supported"].(bool); !ok {
			t.Errorf("attach type without supported: %v", a)
		}
		if _, ok := a["attach_type"].(string); !ok {
			t.Errorf("attach type without name: %v", a)
		}
		if a["supported"] == false && a["reason"] == nil {
			t.Errorf("unsupported attach type without reason: %v", a)
		}
	}
	names := map[string]bool{}
	for _, f := range got.Features {
		names[f["name"].(string)] = true
	}
	for _, n := range []string{"btf", "stats", "iter/bpf_prog", "iter/task_file", "ringbuf", "kprobe_missed"} {
		if !names[n] {
			t.Errorf("feature %s missing", n)
		}
	}
}

func TestCPUModel(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{"processor\t: 0\nmodel name\t: AMD EPYC 7B13\n", "AMD EPYC 7B13"},
		{"processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n", "implementer 0x41 part 0xd4f"},
		{"", "unknown"},
	} {
		p := dir + "/cpuinfo"
		if err := writeFile(p, c.text); err != nil {
			t.Fatal(err)
		}
		if got := cpuModel(p); got != c.want {
			t.Errorf("cpuModel(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
