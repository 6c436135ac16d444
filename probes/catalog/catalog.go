// Package catalog holds bpfleet's own probes: one minimal counting program
// per attach type on a trigger the agent controls, filtered to the thread
// that triggers it, and the triggers themselves (the getpgid syscall from
// user space, or an in-kernel driver run with BPF_PROG_TEST_RUN as in the
// kernel's selftests/bpf trigger bench).
//
// Every probe is loaded on its own, so a program the kernel refuses (the
// trampoline family under lockdown, kprobes on a kernel without them) is one
// error for one attach type and never stops the others.
package catalog

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// AttachType names an attach type as bpfleet reports it.
type AttachType string

// The attach types of the catalog.
const (
	Fentry      AttachType = "fentry"
	Fexit       AttachType = "fexit"
	FmodRet     AttachType = "fmod_ret"
	FentryS     AttachType = "fentry.s"
	TpBTF       AttachType = "tp_btf"
	RawTp       AttachType = "raw_tp"
	Tracepoint  AttachType = "tracepoint"
	Kprobe      AttachType = "kprobe"
	Kretprobe   AttachType = "kretprobe"
	KprobeMulti AttachType = "kprobe.multi"
	Uprobe      AttachType = "uprobe"
	LSM         AttachType = "lsm"
)

// All lists the catalog's attach types in report order.
func All() []AttachType {
	return []AttachType{Fentry, Fexit, FmodRet, FentryS, TpBTF, RawTp, Tracepoint, Kprobe, Kretprobe, KprobeMulti, Uprobe, LSM}
}

// ParseAttachType accepts a catalog attach type by name.
func ParseAttachType(s string) (AttachType, error) {
	for _, t := range All() {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown attach type %q (known: %s)", s, joinTypes(All()))
}

func joinTypes(ts []AttachType) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// Mode is how the probes are triggered.
type Mode string

const (
	// Syscall triggers from user space with getpgid(2): what an
	// application pays, syscall entry included.
	Syscall Mode = "syscall"
	// Kernel triggers from a BPF driver program looping inside the kernel,
	// so the dispatch cost of the attach type is not hidden behind a syscall.
	Kernel Mode = "kernel"
)

// ParseMode accepts "syscall" or "kernel".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case Syscall, Kernel:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown mode %q (want syscall or kernel)", s)
}

// Stage is the step at which the kernel refused a probe.
type Stage string

const (
	StageTarget Stage = "target" // no attach point for this attach type in this mode
	StageLoad   Stage = "load"
	StageAttach Stage = "attach"
	// StageTrigger: the in-kernel driver that fires the probe was refused.
	StageTrigger Stage = "trigger"
)

// Error is a probe the kernel refused, with the step that failed.
type Error struct {
	AttachType AttachType
	Mode       Mode
	Stage      Stage
	Err        error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s probe (%s mode): %s: %v", e.AttachType, e.Mode, e.Stage, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is the kernel's answer in one short line, such as
// "load: operation not permitted".
func (e *Error) Reason() string {
	return string(e.Stage) + ": " + shortError(e.Err)
}

// shortError reduces an error from cilium/ebpf to the kernel's errno, plus
// the verifier's last words when it has some; other errors stay whole.
func shortError(err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		// cilium/ebpf names the version that introduced a missing feature;
		// the kernel's own refusal is the fact, a version is not.
		return requiresVersion().ReplaceAllString(err.Error(), "")
	}
	msg := errno.Error()
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		for i := len(ve.Log) - 1; i >= 0; i-- {
			if l := strings.TrimSpace(ve.Log[i]); l != "" && !strings.HasPrefix(l, "processed ") {
				msg += ": " + l
				break
			}
		}
	}
	return msg
}

// requiresVersion is compiled on first use, not at package init: every
// bpfleet command links this package, and a one-shot list never needs it.
var requiresVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(` \(requires >= v[0-9.]+\)`) })

// Reason is err's one-line kernel answer when err is a probe *Error, and
// the whole error otherwise.
func Reason(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Reason()
	}
	return err.Error()
}

// SyscallWrapper is the kernel function behind getpgid(2) on this arch:
// the attach point of the trampoline and kprobe probes in syscall mode.
func SyscallWrapper() string {
	switch runtime.GOARCH {
	case "amd64":
		return "__x64_sys_getpgid"
	case "arm64":
		return "__arm64_sys_getpgid"
	}
	return "sys_getpgid"
}

// Driver is an in-kernel trigger program.
type Driver string

const (
	// DriverHelper calls bpf_get_numa_node_id(): attach point of fentry,
	// fexit and the kprobes in kernel mode.
	DriverHelper Driver = "drive_helper"
	// DriverKfunc calls the kfunc bpf_modify_return_test_tp(), which fires
	// the bpf_test_run:bpf_trigger_tp tracepoint: attach point of fmod_ret,
	// tp_btf, raw_tp and tracepoint in kernel mode.
	DriverKfunc Driver = "drive_kfunc"
)

// errNoTrigger: the attach type has no attach point an in-kernel driver reaches.
var errNoTrigger = notSupported("no in-kernel trigger")

// notSupported is an error that wraps ebpf.ErrNotSupported without saying so
// in its text.
type notSupported string

func (e notSupported) Error() string        { return string(e) }
func (e notSupported) Is(target error) bool { return target == ebpf.ErrNotSupported }

// target is where a probe attaches in one mode.
type target struct {
	prog   string // program name in catalog.bpf.c
	fn     string // kernel function, tracepoint or hook name
	group  string // tracepoint group
	driver Driver // kernel mode only
}

// targetOf says where probe t attaches in mode m, or why it has nowhere to.
func targetOf(t AttachType, m Mode) (target, error) {
	if m == Kernel {
		switch t {
		case Fentry, Fexit, Kprobe, Kretprobe, KprobeMulti:
			return target{prog: progName(t), fn: "bpf_get_numa_node_id", driver: DriverHelper}, nil
		case FmodRet:
			return target{prog: progName(t), fn: "bpf_modify_return_test_tp", driver: DriverKfunc}, nil
		case TpBTF:
			return target{prog: "on_tp_btf", fn: "bpf_trigger_tp", driver: DriverKfunc}, nil
		case RawTp:
			return target{prog: "on_raw_tp", fn: "bpf_trigger_tp", driver: DriverKfunc}, nil
		case Tracepoint:
			return target{prog: progName(t), group: "bpf_test_run", fn: "bpf_trigger_tp", driver: DriverKfunc}, nil
		}
		return target{}, errNoTrigger
	}
	switch t {
	case Fentry, Fexit, FmodRet, FentryS, Kprobe, Kretprobe, KprobeMulti:
		return target{prog: progName(t), fn: SyscallWrapper()}, nil
	case TpBTF:
		return target{prog: "on_tp_btf_sys_enter", fn: "sys_enter"}, nil
	case RawTp:
		return target{prog: "on_raw_tp_sys_enter", fn: "sys_enter"}, nil
	case Tracepoint:
		return target{prog: progName(t), group: "syscalls", fn: "sys_enter_getpgid"}, nil
	case Uprobe:
		return target{prog: progName(t), fn: uprobeSymbol}, nil
	case LSM:
		return target{prog: progName(t), fn: "task_getpgid"}, nil
	}
	return target{}, fmt.Errorf("unknown attach type %q", t)
}

func progName(t AttachType) string {
	return "on_" + strings.NewReplacer(".", "_").Replace(string(t))
}

// DriverFor is the in-kernel driver that fires probe t in kernel mode.
func DriverFor(t AttachType) (Driver, error) {
	tg, err := targetOf(t, Kernel)
	return tg.driver, err
}

// Probe is one loaded catalog program, counting the runs one thread causes.
type Probe struct {
	Type AttachType
	Mode Mode
	// Target is the kernel function, tracepoint, hook or symbol it attaches to.
	Target string

	tg   target
	coll *ebpf.Collection
	prog *ebpf.Program
	hits *ebpf.Variable
	link link.Link
}

// Load loads the probe for t in mode m, counting only runs caused by the
// thread tid (see unix.Gettid). It does not attach. A refusal is an *Error
// whose Stage says what failed.
func Load(t AttachType, m Mode, tid int) (*Probe, error) {
	tg, err := targetOf(t, m)
	if err != nil {
		return nil, &Error{AttachType: t, Mode: m, Stage: StageTarget, Err: err}
	}
	spec, err := catalogSpec()
	if err != nil {
		return nil, err
	}
	ps, ok := spec.Programs[tg.prog]
	if !ok {
		return nil, fmt.Errorf("catalog has no program %s", tg.prog)
	}
	switch t {
	case Fentry, Fexit, FmodRet, FentryS, LSM, TpBTF:
		ps.AttachTo = tg.fn
	}
	vars := map[string]any{"target_tid": uint32(tid), "target_nr": int64(unix.SYS_GETPGID)}
	coll, err := loadOne(spec, tg.prog, vars)
	if err != nil {
		return nil, &Error{AttachType: t, Mode: m, Stage: StageLoad, Err: err}
	}
	target := tg.fn
	if tg.group != "" {
		target = tg.group + ":" + tg.fn
	}
	return &Probe{Type: t, Mode: m, Target: target, tg: tg, coll: coll, prog: coll.Programs[tg.prog], hits: coll.Variables["hits"]}, nil
}

// parsedSpec parses the embedded ELF once; every load works on a copy.
var parsedSpec = sync.OnceValues(loadCatalog)

func catalogSpec() (*ebpf.CollectionSpec, error) {
	spec, err := parsedSpec()
	if err != nil {
		return nil, fmt.Errorf("reading catalog spec: %w", err)
	}
	return spec.Copy(), nil
}

// loadOne loads only program name (and the maps it uses) from spec.
func loadOne(spec *ebpf.CollectionSpec, name string, vars map[string]any) (*ebpf.Collection, error) {
	for n := range spec.Programs {
		if n != name {
			delete(spec.Programs, n)
		}
	}
	for n, v := range vars {
		if err := spec.Variables[n].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", n, err)
		}
	}
	return ebpf.NewCollection(spec)
}

// Attach attaches the loaded probe to its target.
func (p *Probe) Attach() error {
	if p.link != nil {
		return nil
	}
	l, err := p.attach()
	if err != nil {
		return &Error{AttachType: p.Type, Mode: p.Mode, Stage: StageAttach, Err: err}
	}
	p.link = l
	return nil
}

func (p *Probe) attach() (link.Link, error) {
	switch p.Type {
	case Fentry, Fexit, FmodRet, FentryS, TpBTF:
		return link.AttachTracing(link.TracingOptions{Program: p.prog})
	case LSM:
		return link.AttachLSM(link.LSMOptions{Program: p.prog})
	case RawTp:
		return link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.tg.fn, Program: p.prog})
	case Tracepoint:
		return link.Tracepoint(p.tg.group, p.tg.fn, p.prog, nil)
	case Kprobe:
		return link.Kprobe(p.tg.fn, p.prog, nil)
	case Kretprobe:
		return link.Kretprobe(p.tg.fn, p.prog, nil)
	case KprobeMulti:
		return link.KprobeMulti(p.prog, link.KprobeMultiOptions{Symbols: []string{p.tg.fn}})
	case Uprobe:
		return attachUprobe(p.prog)
	}
	return nil, fmt.Errorf("no attach method for %s", p.Type)
}

// Detach removes the probe from its target; it stays loaded.
func (p *Probe) Detach() error {
	if p.link == nil {
		return nil
	}
	err := p.link.Close()
	p.link = nil
	return err
}

// Link is the probe's link while attached, else nil.
func (p *Probe) Link() link.Link { return p.link }

// Program is the probe's program, for its id and the kernel's stats.
func (p *Probe) Program() *ebpf.Program { return p.prog }

// Hits is how many runs the target thread has caused since the last reset.
// It reads the program's memory-mapped global: no syscall on kernels with
// mmapable array maps.
func (p *Probe) Hits() (uint64, error) {
	var n uint64
	if err := p.hits.Get(&n); err != nil {
		return 0, fmt.Errorf("reading %s hits: %w", p.Type, err)
	}
	return n, nil
}

// ResetHits sets the hit counter to zero.
func (p *Probe) ResetHits() error {
	if err := p.hits.Set(uint64(0)); err != nil {
		return fmt.Errorf("resetting %s hits: %w", p.Type, err)
	}
	return nil
}

// Close detaches and unloads the probe.
func (p *Probe) Close() error {
	err := p.Detach()
	p.coll.Close()
	return err
}

// The uprobe's target is a function of this binary that the syscall-mode
// trigger calls on every trigger, so the uprobe shares its baseline with the
// other attach types.
const uprobeSymbol = "github.com/bpfleet/bpfleet/probes/catalog.UprobeTarget"

// attachUprobe attaches to UprobeTarget in the running executable. It
// computes the file offset from the function's own address, so it also
// works in a stripped binary; PIE binaries fall back to the symbol table.
func attachUprobe(prog *ebpf.Program) (link.Link, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding own executable: %w", err)
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", exe, err)
	}
	opts := &link.UprobeOptions{PID: os.Getpid()}
	if off, err := fileOffset(exe, uint64(reflect.ValueOf(UprobeTarget).Pointer())); err == nil {
		opts.Address = off
	}
	return ex.Uprobe(uprobeSymbol, prog, opts)
}

// fileOffset maps a virtual address of a non-PIE executable to its offset
// in the file, which is what the kernel's uprobe wants.
func fileOffset(path string, addr uint64) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return 0, fmt.Errorf("%s is %s, not a fixed-address executable", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no executable segment of %s", addr, path)
}

// ID is the kernel's id of the probe's program, so a scan can tell the
// agent's own probes from everyone else's.
func (p *Probe) ID() (ebpf.ProgramID, error) {
	info, err := p.prog.Info()
	if err != nil {
		return 0, fmt.Errorf("reading %s probe info: %w", p.Type, err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, fmt.Errorf("kernel reports no id for the %s probe", p.Type)
	}
	return id, nil
}
