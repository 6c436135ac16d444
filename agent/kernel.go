package agent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
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
	if b, err := os.ReadFile(procRoot + "/cpuinfo"); err == nil {
		k.CPUModel = cpuModel(b)
	}
	// The version string names PREEMPT_RT and PREEMPT_DYNAMIC; only
	// without them is the (large, compressed) kernel config worth reading
	// to tell PREEMPT_NONE from PREEMPT_VOLUNTARY.
	var config []byte
	if !strings.Contains(k.Version, "PREEMPT_RT") && !strings.Contains(k.Version, "PREEMPT_DYNAMIC") {
		if b, err := readGzip(procRoot + "/config.gz"); err == nil {
			config = b
		} else if b, err := os.ReadFile("/boot/config-" + k.Release); err == nil {
			config = b
		}
	}
	mode, _ := os.ReadFile("/sys/kernel/debug/sched/preempt")
	k.Preempt, k.PreemptMode, k.PreemptSource = preemptModel(k.Version, config, mode)
	return k
}

func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
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
		switch k {
		case "model name", "Model", "cpu model":
			if v != "" {
				return v
			}
		case "CPU implementer":
			impl = v
		case "CPU part":
			part = v
		}
	}
	if impl != "" {
		return "implementer " + impl + " part " + part
	}
	return ""
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
		return "PREEMPT_RT", "", "config"
	case strings.Contains(version, "PREEMPT_RT"):
		return "PREEMPT_RT", "", "uname"
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

// fullyPreemptible says whether ordinary kernel code can be preempted: a
// trampoline program (which disables migration, not preemption) can then
// be interrupted by another task on its CPU that hits the same program.
func fullyPreemptible(k *KernelInfo) bool {
	switch k.Preempt {
	case "PREEMPT_RT", "PREEMPT", "PREEMPT_LAZY":
		return true
	case "PREEMPT_DYNAMIC":
		return k.PreemptMode == "full" || k.PreemptMode == "lazy"
	}
	return false
}

// missKind says what a program's misses most likely are on this kernel.
//
//   - contention-possible: the per-CPU recursion guard can be held by a task
//     that is not running: a sleepable program, any program on PREEMPT_RT,
//     or a trampoline program on a fully preemptible kernel. Another task on
//     that CPU is then counted as a "recursion" miss though nothing recursed.
//   - recursion: none of that applies and the facts are known.
//   - unknown: the sleepable flag or the preemption model is unknown.
func missKind(p *Program, k *KernelInfo) string {
	if p.Sleepable != nil && *p.Sleepable {
		return MissKindContentionPossible
	}
	if k.Preempt == "PREEMPT_RT" {
		return MissKindContentionPossible
	}
	if trampolineAttach(p.AttachType) && fullyPreemptible(k) {
		return MissKindContentionPossible
	}
	if k.Preempt == "unknown" || (k.Preempt == "PREEMPT_DYNAMIC" && k.PreemptMode == "" && trampolineAttach(p.AttachType)) {
		return MissKindUnknown
	}
	if p.Sleepable == nil && (trampolineAttach(p.AttachType) || strings.HasSuffix(p.AttachType, "?")) {
		return MissKindUnknown
	}
	return MissKindRecursion
}
