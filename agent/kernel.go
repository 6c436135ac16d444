package agent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/internal/sysfile"
)

// ReadKernelInfo describes the running kernel and CPU. procRoot is where
// procfs is mounted (the host's, inside a container).
func ReadKernelInfo(procRoot string) KernelInfo {
	var k KernelInfo
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		k.Release = unix.ByteSliceToString(u.Release[:])
		k.Version = unix.ByteSliceToString(u.Version[:])
		k.Arch = unix.ByteSliceToString(u.Machine[:])
	}
	if k.Arch == "" {
		k.Arch = runtime.GOARCH
	}
	k.CPUs = runtime.NumCPU()
	// Read only as far as the model name: the kernel generates an entry
	// per CPU as the file is read (on a large machine, milliseconds).
	if b, err := sysfile.ReadUntil(procRoot+"/cpuinfo", hasModelName); err == nil {
		k.CPUModel = cpuModel(b)
	}
	// The version string names PREEMPT_RT and PREEMPT_DYNAMIC; only
	// without them is the (large, compressed) kernel config worth reading
	// to tell PREEMPT_NONE from PREEMPT_VOLUNTARY.
	var config []byte
	if !strings.Contains(k.Version, "PREEMPT_RT") && !strings.Contains(k.Version, "PREEMPT_DYNAMIC") {
		if b, err := readGzip(procRoot + "/config.gz"); err == nil {
			config = b
		} else if b, err := sysfile.Read("/boot/config-" + k.Release); err == nil {
			config = b
		}
	}
	mode, _ := sysfile.Read("/sys/kernel/debug/sched/preempt")
	k.Preempt, k.PreemptMode, k.PreemptSource = preemptModel(k.Version, config, mode)
	return k
}

func readGzip(path string) ([]byte, error) {
	b, err := sysfile.Read(path)
	if err != nil {
		return nil, err
	}
	z, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(z)
}

// cpuModel takes the CPU model from /proc/cpuinfo: "model name" on x86,
// implementer and part on arm64 (which has no model name line).
func cpuModel(cpuinfo []byte) string {
	var impl, part string
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case isModelName(k, v):
			return v
		case k == "CPU implementer":
			impl = v
		case k == "CPU part":
			part = v
		}
	}
	if impl != "" {
		return "implementer " + impl + " part " + part
	}
	return ""
}

// isModelName says whether a cpuinfo line (key, value) is the model name
// cpuModel returns when it finds one.
func isModelName(k, v string) bool {
	return (k == "model name" || k == "Model" || k == "cpu model") && v != ""
}

// hasModelName says whether the whole lines of a cpuinfo prefix hold a
// model name line: cpuModel of the prefix then equals cpuModel of the
// whole file (it takes the first), and the rest need not be read.
func hasModelName(prefix []byte) bool {
	lines := prefix[:bytes.LastIndexByte(prefix, '\n')+1]
	for len(lines) > 0 {
		var line []byte
		line, lines, _ = bytes.Cut(lines, []byte{'\n'})
		if k, v, ok := bytes.Cut(line, []byte{':'}); ok && isModelName(string(bytes.TrimSpace(k)), string(bytes.TrimSpace(v))) {
			return true
		}
	}
	return false
}

// preemptModel reads the preemption model, most specific source first:
// debugfs tells PREEMPT_DYNAMIC's current mode, the kernel config says what
// was built, and the uname version string names PREEMPT_RT / PREEMPT_DYNAMIC
// / PREEMPT. Returns model, dynamic mode (if any) and the source used.
func preemptModel(version string, config, debugPreempt []byte) (model, mode, source string) {
	cfg := func(opt string) bool {
		return bytes.Contains(config, []byte("\n"+opt+"=y")) || bytes.HasPrefix(config, []byte(opt+"=y"))
	}
	if m := currentDynamicMode(debugPreempt); m != "" {
		mode = m
	}
	switch {
	case len(config) > 0 && cfg("CONFIG_PREEMPT_RT"):
		return "PREEMPT_RT", mode, sourceWithMode("config", mode)
	case strings.Contains(version, "PREEMPT_RT"):
		return "PREEMPT_RT", mode, sourceWithMode("uname", mode)
	case len(config) > 0 && cfg("CONFIG_PREEMPT_DYNAMIC"):
		return "PREEMPT_DYNAMIC", mode, sourceWithMode("config", mode)
	case strings.Contains(version, "PREEMPT_DYNAMIC"):
		return "PREEMPT_DYNAMIC", mode, sourceWithMode("uname", mode)
	case len(config) > 0 && cfg("CONFIG_PREEMPT_LAZY"):
		return "PREEMPT_LAZY", "", "config"
	case len(config) > 0 && cfg("CONFIG_PREEMPT"):
		return "PREEMPT", "", "config"
	case len(config) > 0 && cfg("CONFIG_PREEMPT_VOLUNTARY"):
		return "PREEMPT_VOLUNTARY", "", "config"
	case len(config) > 0 && cfg("CONFIG_PREEMPT_NONE"):
		return "PREEMPT_NONE", "", "config"
	case strings.Contains(version, " PREEMPT "):
		return "PREEMPT", "", "uname"
	}
	return "unknown", "", ""
}

func sourceWithMode(src, mode string) string {
	if mode != "" {
		return src + "+debugfs"
	}
	return src
}

// currentDynamicMode parses /sys/kernel/debug/sched/preempt, e.g.
// "none voluntary (full) lazy", returning the parenthesised mode.
func currentDynamicMode(b []byte) string {
	i := bytes.IndexByte(b, '(')
	j := bytes.IndexByte(b, ')')
	if i < 0 || j <= i+1 {
		return ""
	}
	return string(b[i+1 : j])
}

// fullyPreemptible says whether ordinary kernel code can be preempted.
func fullyPreemptible(k *KernelInfo) bool {
	switch k.Preempt {
	case "PREEMPT_RT", "PREEMPT", "PREEMPT_LAZY":
		return true
	case "PREEMPT_DYNAMIC":
		return k.PreemptMode == "full" || k.PreemptMode == "lazy"
	}
	return false
}

// guardedAttach reports whether an attach type runs behind the per-CPU
// recursion guard that counts recursion_misses: the trampoline family and
// the raw tracepoint family (raw_tp, tp_btf). Both take the guard with
// migration disabled, not preemption, so on a fully preemptible kernel
// the holder can be switched out mid-run: the kernel matrix measured tp_btf
// and fentry programs preempted on 7.2 full/lazy and PREEMPT_RT kernels.
func guardedAttach(name string) bool {
	if reader.TrampolineAttach(name) {
		return true
	}
	switch name {
	case "raw_tp", "tp_btf", "tp_btf.s", "raw_tp.w":
		return true
	}
	return false
}

// missCounted says whether a program runs behind a guard that skips
// nested runs: the trampoline and raw tracepoint guards (guardedAttach) and
// bpf_prog_active, which trace_call_bpf and the kprobe/uprobe multi links
// take. A program whose attach type is not known yet (unattached, or the
// tracing "?" guess) is judged by its program type.
func missCounted(p *Program) bool {
	if guardedAttach(p.AttachType) {
		return true
	}
	switch p.AttachType {
	case "kprobe", "kretprobe", "kprobe.multi", "kretprobe.multi", "uprobe", "uretprobe",
		"uprobe.multi", "uretprobe.multi", "tracepoint", "perf_event":
		return true
	case Unattached, "":
	default:
		if !strings.HasSuffix(p.AttachType, "?") {
			return false
		}
	}
	switch p.Type {
	case "kprobe", "tracepoint", "raw_tracepoint", "raw_tracepoint_writable", "tracing",
		"lsm", "perf_event", "ext", "struct_ops":
		return true
	}
	return false
}

// missKind says what a program's misses most likely are on this kernel.
//
//   - contention-possible: the per-CPU recursion guard can be held by a task
//     that is not running: a sleepable program, any program on PREEMPT_RT,
//     or a guarded program (trampoline, raw_tp, tp_btf) on a fully
//     preemptible kernel. Another task on that CPU is then counted as a
//     "recursion" miss though nothing recursed.
//   - recursion: none of that applies and the facts are known.
//   - unknown: the sleepable flag or the preemption model is unknown.
//   - none: no recursion guard covers the program (iter, socket filter,
//     XDP, tc, cgroup, ...): the kernel never counts a miss for it.
func missKind(p *Program, k *KernelInfo) string {
	if !missCounted(p) {
		return MissKindNone
	}
	if p.Sleepable != nil && *p.Sleepable {
		return MissKindContentionPossible
	}
	if k.Preempt == "PREEMPT_RT" {
		return MissKindContentionPossible
	}
	guarded := guardedAttach(p.AttachType)
	if guarded && fullyPreemptible(k) {
		return MissKindContentionPossible
	}
	if k.Preempt == "unknown" || (k.Preempt == "PREEMPT_DYNAMIC" && k.PreemptMode == "" && guarded) {
		return MissKindUnknown
	}
	if p.Sleepable == nil && (reader.TrampolineAttach(p.AttachType) || strings.HasSuffix(p.AttachType, "?")) {
		return MissKindUnknown
	}
	return MissKindRecursion
}
