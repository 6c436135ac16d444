package catalog

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Trigger fires the catalog's attach points from the calling thread.
type Trigger interface {
	// Fire makes at least n triggered calls and returns how many it made
	// (kernel drivers work in whole batches).
	Fire(n int) (int, error)
	Close() error
}

// SyscallTrigger calls getpgid(2) through UprobeTarget, so one trigger
// fires every syscall-mode probe, the uprobe included.
type SyscallTrigger struct{}

// Fire calls getpgid n times.
func (SyscallTrigger) Fire(n int) (int, error) {
	pid := os.Getpid()
	for i := 0; i < n; i++ {
		if e := UprobeTarget(pid); e != 0 {
			return i, fmt.Errorf("getpgid: %w", e)
		}
	}
	return n, nil
}

// Close does nothing.
func (SyscallTrigger) Close() error { return nil }

// UprobeTarget is the uprobe's attach point: getpgid(pid) for the calling
// process. pid is not 0 so that the kernel also runs the task_getpgid LSM
// hook. It must stay a real function, and a nosplit one: a splittable Go
// function re-enters its own first instruction after a stack-growth or
// preemption check, which would fire the uprobe twice for one call.
//
//go:noinline
//go:nosplit
func UprobeTarget(pid int) unix.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_GETPGID, uintptr(pid), 0, 0)
	return e
}

// DefaultBatch is the number of helper or kfunc calls per driver run: large
// enough that the bpf() syscall of each test run is a small share.
const DefaultBatch = 10000

// KernelTrigger runs an in-kernel driver program with BPF_PROG_TEST_RUN in
// the calling thread's context; each run makes Batch calls of the attach point.
type KernelTrigger struct {
	Driver Driver
	Batch  int
	coll   *ebpf.Collection
	prog   *ebpf.Program
}

// NewKernelTrigger loads driver d with batch calls per run (0: DefaultBatch).
// A kernel without the driver's helper, kfunc or bpf_loop refuses it with
// a *Error at StageTrigger.
func NewKernelTrigger(d Driver, batch int) (*KernelTrigger, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	spec, err := catalogSpec()
	if err != nil {
		return nil, err
	}
	coll, err := loadOne(spec, string(d), map[string]any{"batch_iters": uint32(batch)})
	if err != nil {
		return nil, &Error{AttachType: AttachType(d), Mode: Kernel, Stage: StageTrigger, Err: err}
	}
	return &KernelTrigger{Driver: d, Batch: batch, coll: coll, prog: coll.Programs[string(d)]}, nil
}

// Fire runs the driver ceil(n/Batch) times.
func (k *KernelTrigger) Fire(n int) (int, error) {
	runs := (n + k.Batch - 1) / k.Batch
	for i := 0; i < runs; i++ {
		if _, err := k.prog.Run(&ebpf.RunOptions{}); err != nil {
			return i * k.Batch, fmt.Errorf("running driver %s: %w", k.Driver, err)
		}
	}
	return runs * k.Batch, nil
}

// Close unloads the driver.
func (k *KernelTrigger) Close() error { k.coll.Close(); return nil }

// NewTrigger is the trigger for mode m that fires probe t.
func NewTrigger(t AttachType, m Mode, batch int) (Trigger, error) {
	if m == Syscall {
		return SyscallTrigger{}, nil
	}
	d, err := DriverFor(t)
	if err != nil {
		return nil, &Error{AttachType: t, Mode: m, Stage: StageTarget, Err: err}
	}
	return NewKernelTrigger(d, batch)
}
