package features

import (
	"bufio"
	"errors"
	"os"
	"runtime"
	"strings"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"golang.org/x/sys/unix"
)

// Kernel identifies the kernel and CPU the answers are about.
type Kernel struct {
	Release  string `json:"release"`
	Version  string `json:"version"`
	Arch     string `json:"arch"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
}

// ReadKernel reads uname and /proc/cpuinfo.
func ReadKernel() Kernel {
	var u unix.Utsname
	k := Kernel{Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	if unix.Uname(&u) == nil {
		k.Release = unix.ByteSliceToString(u.Release[:])
		k.Version = unix.ByteSliceToString(u.Version[:])
		k.Arch = unix.ByteSliceToString(u.Machine[:])
	}
	k.CPUModel = cpuModel("/proc/cpuinfo")
	return k
}

// cpuModel is x86's "model name", or on arm64 (which has none) the
// implementer and part numbers that name the core.
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	fields := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, dup := fields[k]; !dup && v != "" {
			fields[k] = v
		}
	}
	for _, k := range []string{"model name", "Model", "Hardware"} {
		if v := fields[k]; v != "" {
			return v
		}
	}
	if impl, part := fields["CPU implementer"], fields["CPU part"]; impl != "" {
		return "implementer " + impl + " part " + part
	}
	return "unknown"
}

// Feature is one yes/no answer with the kernel's reason.
type Feature struct {
	Name      string `json:"name,omitempty"`
	Supported bool   `json:"supported"`
	// Inconclusive is set when the check could not tell (Reason says why).
	Inconclusive bool   `json:"inconclusive,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// AttachType is the answer for one catalog attach type.
type AttachType struct {
	AttachType   string `json:"attach_type"`
	Supported    bool   `json:"supported"`
	Inconclusive bool   `json:"inconclusive,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Kernel mode: triggered by an in-kernel driver (bpfleet bench --mode kernel).
	KernelMode Feature `json:"kernel_mode"`
}

// Report is what `bpfleet probe` prints.
type Report struct {
	Kernel      Kernel       `json:"kernel"`
	Features    []Feature    `json:"features"`
	AttachTypes []AttachType `json:"attach_types"`
}

func feature(name string, err error) Feature {
	return Feature{Name: name, Supported: err == nil, Inconclusive: err != nil && !IsUnsupported(err), Reason: Reason(err)}
}

// IsUnsupported is true for an answer that wraps ebpf.ErrNotSupported.
func IsUnsupported(err error) bool {
	var u *Unsupported
	return errors.As(err, &u)
}

// Probe asks the kernel everything in the report. It never fails as a
// whole: each answer carries its own reason.
func Probe() Report {
	r := Report{Kernel: ReadKernel()}
	r.Features = []Feature{
		feature("btf", HaveBTF()),
		feature("stats", HaveStats()),
		feature("iter/"+IterBPFProg, HaveIter(IterBPFProg)),
		feature("iter/"+IterTaskFile, HaveIter(IterTaskFile)),
		feature("ringbuf", HaveRingBuf()),
		feature("kprobe_missed", HaveKprobeMissed()),
		feature("kernel_trigger/helper", HaveKernelTrigger(catalog.DriverHelper)),
		feature("kernel_trigger/kfunc", HaveKernelTrigger(catalog.DriverKfunc)),
	}
	for _, t := range catalog.All() {
		f := feature(string(t), HaveAttachType(t, catalog.Syscall))
		km := feature("kernel_mode", HaveAttachType(t, catalog.Kernel))
		km.Name = ""
		r.AttachTypes = append(r.AttachTypes, AttachType{
			AttachType: string(t), Supported: f.Supported, Inconclusive: f.Inconclusive, Reason: f.Reason, KernelMode: km,
		})
	}
	return r
}
