// Package features asks the running kernel what bpfleet can use: each
// catalog attach type (loaded, attached and fired once), BTF, run-time
// stats, iterators, the ring buffer and kprobe link `missed`.
//
// As in cilium/ebpf's features package, each probe returns nil when the
// feature is available, an error wrapping ebpf.ErrNotSupported when the
// kernel refuses it (with the kernel's reason), and any other error when the
// answer is inconclusive (for example missing privileges). Results are cached
// for the life of the process.
package features

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	cfeatures "github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Unsupported is a feature the kernel refused, with its reason. It wraps
// ebpf.ErrNotSupported.
type Unsupported struct {
	Reason string
}

func (u *Unsupported) Error() string { return u.Reason + ": " + ebpf.ErrNotSupported.Error() }

// Is makes errors.Is(err, ebpf.ErrNotSupported) true.
func (u *Unsupported) Is(target error) bool { return target == ebpf.ErrNotSupported }

func unsupported(format string, args ...any) error {
	return &Unsupported{Reason: fmt.Sprintf(format, args...)}
}

// Reason is the one-line answer for a probe result: "" for nil, the
// kernel's reason for unsupported, the error text when inconclusive.
func Reason(err error) string {
	var u *Unsupported
	if errors.As(err, &u) {
		return u.Reason
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

var cache sync.Map // key string -> *cached

type cached struct {
	once sync.Once
	err  error
}

// memo runs probe once per key for the life of the process.
func memo(key string, probe func() error) error {
	c, _ := cache.LoadOrStore(key, &cached{})
	e := c.(*cached)
	e.once.Do(func() { e.err = probe() })
	return e.err
}

// HaveAttachType says whether the catalog probe for t loads, attaches and
// counts a trigger of its own in mode m.
func HaveAttachType(t catalog.AttachType, m catalog.Mode) error {
	return memo("attach:"+string(m)+":"+string(t), func() error { return probeAttachType(t, m) })
}

func probeAttachType(t catalog.AttachType, m catalog.Mode) error {
	// The probe counts one thread's runs: this one, for the whole check.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	trig, err := catalog.NewTrigger(t, m, 1)
	if err != nil {
		return classify(err)
	}
	defer trig.Close()
	p, err := catalog.Load(t, m, unix.Gettid())
	if err != nil {
		return classify(err)
	}
	defer p.Close()
	if err := p.Attach(); err != nil {
		return classify(err)
	}
	calls, err := trig.Fire(3)
	if err != nil {
		return fmt.Errorf("triggering %s: %w", t, err)
	}
	hits, err := p.Hits()
	if err != nil {
		return err
	}
	if hits != uint64(calls) {
		// Loaded and attached but not run: an LSM program when bpf is not
		// in the kernel's active LSM list, for example.
		return unsupported("run: attached to %s but counted %d of %d calls", p.Target, hits, calls)
	}
	return nil
}

// classify turns a refusal into Unsupported with the kernel's reason, and
// keeps errors that say nothing about the kernel inconclusive.
func classify(err error) error {
	var pe *catalog.Error
	if !errors.As(err, &pe) {
		return err
	}
	reason := pe.Reason()
	if pe.Stage == catalog.StageTarget || errors.Is(err, ebpf.ErrNotSupported) {
		return &Unsupported{Reason: reason}
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		// Lockdown refuses with EPERM too; only a privileged caller's
		// EPERM is the kernel saying no.
		if !privileged() {
			return fmt.Errorf("%s (without CAP_BPF or CAP_SYS_ADMIN: inconclusive)", reason)
		}
		return &Unsupported{Reason: reason}
	case unix.EINVAL, unix.ENOENT, unix.EOPNOTSUPP, unix.E2BIG, unix.ESRCH, unix.ENODEV, unix.ENOSYS, 524 /* ENOTSUPP */ :
		return &Unsupported{Reason: reason}
	}
	return err
}

// Inconclusive says whether err, a failure to load, attach or run a probe,
// says nothing about the kernel (a missing mount or privilege), as
// opposed to the kernel's refusal.
func Inconclusive(err error) bool {
	var u *Unsupported
	return err != nil && !errors.As(classify(err), &u)
}

// privileged reports whether the process has CAP_SYS_ADMIN or CAP_BPF.
func privileged() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && (caps&(1<<unix.CAP_SYS_ADMIN) != 0 || caps&(1<<unix.CAP_BPF) != 0)
		}
	}
	return false
}

// HaveBTF says whether the kernel exposes its BTF (CO-RE, tp_btf, fentry).
func HaveBTF() error {
	return memo("btf", func() error {
		if _, err := btf.LoadKernelSpec(); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrNotExist) {
				return unsupported("no kernel BTF: %v", err)
			}
			return err
		}
		return nil
	})
}

// HaveStats says whether BPF_ENABLE_STATS(BPF_STATS_RUN_TIME) works. It
// holds the stats fd only for the duration of the check.
func HaveStats() error {
	return memo("stats", func() error {
		c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
				return unsupported("BPF_ENABLE_STATS: %v", err)
			}
			return fmt.Errorf("BPF_ENABLE_STATS: %w", err)
		}
		return c.Close()
	})
}

// HaveRingBuf says whether BPF_MAP_TYPE_RINGBUF exists.
func HaveRingBuf() error {
	return memo("ringbuf", func() error { return cfeatures.HaveMapType(ebpf.RingBuf) })
}

// Iterators the agent can use.
const (
	IterBPFProg  = "bpf_prog"
	IterTaskFile = "task_file"
)

// HaveIter says whether an iter/<name> program (IterBPFProg, IterTaskFile)
// loads, attaches and can be read to the end.
func HaveIter(name string) error {
	return memo("iter:"+name, func() error {
		prog := map[string]string{IterBPFProg: "iter_bpf_prog", IterTaskFile: "iter_task_file"}[name]
		if prog == "" {
			return fmt.Errorf("unknown iterator %q", name)
		}
		spec, err := loadFeatures()
		if err != nil {
			return fmt.Errorf("reading features spec: %w", err)
		}
		for n := range spec.Programs {
			if n != prog {
				delete(spec.Programs, n)
			}
		}
		coll, err := ebpf.NewCollection(spec)
		if err != nil {
			return classify(&catalog.Error{AttachType: catalog.AttachType("iter/" + name), Stage: catalog.StageLoad, Err: err})
		}
		defer coll.Close()
		it, err := link.AttachIter(link.IterOptions{Program: coll.Programs[prog]})
		if err != nil {
			return classify(&catalog.Error{AttachType: catalog.AttachType("iter/" + name), Stage: catalog.StageAttach, Err: err})
		}
		defer it.Close()
		r, err := it.Open()
		if err != nil {
			return fmt.Errorf("opening iter/%s: %w", name, err)
		}
		defer r.Close()
		if _, err := io.Copy(io.Discard, r); err != nil {
			return fmt.Errorf("reading iter/%s: %w", name, err)
		}
		var seen uint64
		if err := coll.Variables["seen"].Get(&seen); err != nil {
			return err
		}
		if seen == 0 {
			// There is always at least this program (bpf_prog) and this
			// process's open files (task_file).
			return unsupported("run: iter/%s visited nothing", name)
		}
		return nil
	})
}

// HaveKprobeMissed says whether kprobe links report their `missed` count
// (Linux 6.7+): kprobes must attach here, and the kernel's own BTF must
// have the field in bpf_link_info, since an old kernel reports 0 for a
// field it does not know.
func HaveKprobeMissed() error {
	return memo("kprobe_missed", func() error {
		if err := HaveAttachType(catalog.Kprobe, catalog.Syscall); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				return unsupported("kprobe: %s", Reason(err))
			}
			return err
		}
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			return fmt.Errorf("reading kernel BTF: %w", err)
		}
		var info *btf.Struct
		if err := spec.TypeByName("bpf_link_info", &info); err != nil {
			return fmt.Errorf("finding bpf_link_info in kernel BTF: %w", err)
		}
		if !hasPath(info, "perf_event", "kprobe", "missed") {
			return unsupported("kernel's bpf_link_info has no perf_event.kprobe.missed")
		}
		return nil
	})
}

// hasPath walks named members through anonymous unions and structs.
func hasPath(t btf.Type, names ...string) bool {
	if len(names) == 0 {
		return true
	}
	var members []btf.Member
	switch c := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	default:
		return false
	}
	for _, m := range members {
		if m.Name == names[0] && hasPath(m.Type, names[1:]...) {
			return true
		}
		if m.Name == "" && hasPath(m.Type, names...) {
			return true
		}
	}
	return false
}

// HaveKernelTrigger says whether in-kernel driver d loads and runs.
func HaveKernelTrigger(d catalog.Driver) error {
	return memo("driver:"+string(d), func() error {
		k, err := catalog.NewKernelTrigger(d, 1)
		if err != nil {
			return classify(err)
		}
		defer k.Close()
		if _, err := k.Fire(1); err != nil {
			return classify(&catalog.Error{AttachType: catalog.AttachType(d), Mode: catalog.Kernel, Stage: "run", Err: err})
		}
		return nil
	})
}
