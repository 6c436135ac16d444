// Package statstable sums the run-time statistics (run count, run time,
// recursion misses) of a given list of BPF programs in one syscall: a
// BPF_PROG_TYPE_SYSCALL program, run by BPF_PROG_TEST_RUN, reads each
// program's per-CPU struct bpf_prog_stats from the prog->stats address
// the caller wrote into its slot of an mmapped array (probes/progstats'
// records carry it) and writes the sums beside it.
//
// It reads kernel memory at addresses the caller gives: an address is only
// right while its program is loaded. The caller must know that none was
// unloaded since it learned the addresses, and must check after the run
// that none was unloaded during it (probes/bpfevents: the kernel writes a
// program's UNLOAD record before it frees the program's memory), and that
// no CPU went offline meanwhile (Hotplugs: the kernel turns a CPU's perf
// events off for good when it goes offline).
//
// Two variants of the program: plain loads through the bpf_rdonly_cast
// kfunc (Linux 6.2+), else bpf_probe_read_kernel; the kernel is asked (the
// load is tried), never its version.
package statstable

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Slot is one program's slot: Stats is the caller's, the rest the
// program's. Its layout is struct slot in statstable.bpf.c.
type Slot struct {
	Stats  uint64 // prog->stats
	Cnt    uint64
	Nsecs  uint64
	Misses uint64
	CPUs   uint32
	Flags  uint32
}

// Bits of Slot.Flags.
const (
	// FlagSummed says Cnt, Nsecs (and Misses with FlagMisses) are sums
	// over every possible CPU; without it a read failed and the slot's
	// numbers are not to be used.
	FlagSummed = 1 << 0
	// FlagMisses says the kernel has bpf_prog_stats.misses (5.12+).
	FlagMisses = 1 << 1
)

// Variants of the program.
const (
	VariantCast  = "rdonly_cast"
	VariantProbe = "probe_read"
)

// MinCapacity is the least capacity Capacity gives.
const MinCapacity = 4096

// Capacity is the table size to load for n programs: room to grow (twice
// n, rounded up to a power of two) so that a reload is rare.
func Capacity(n int) int {
	c := MinCapacity
	for c < 2*n {
		c *= 2
	}
	return c
}

// Table is a loaded program and its mmapped slots. Not safe for
// concurrent use.
type Table struct {
	coll    *ebpf.Collection
	prog    *ebpf.Program
	mem     []byte
	slots   []Slot
	cpus    int
	variant string
	// hotplugs points at the hotplug counter in hpMem; hpLink attaches
	// its program.
	hpMem    []byte
	hotplugs *uint64
	hpLink   link.Link
	// CastErr says why the rdonly_cast variant was refused ("" when
	// it is the one loaded).
	CastErr string
	args    args
	attr    bpfsys.TestRunAttr
}

// args is struct args in statstable.bpf.c: the run's ctx.
type args struct {
	N   uint32
	Bad uint32
}

// Load loads the program for cpus possible CPUs with capacity slots. The
// rdonly_cast variant is tried first, then the probe_read one. An error
// wraps ebpf.ErrNotSupported where the kernel refuses both.
func Load(cpus, capacity int) (*Table, error) {
	if cpus <= 0 || capacity <= 0 {
		return nil, fmt.Errorf("stats table: %d CPUs, capacity %d", cpus, capacity)
	}
	t, err := load(cpus, capacity, "sum_stats_cast")
	if err == nil {
		t.variant = VariantCast
		return t, nil
	}
	castErr := err
	t, err = load(cpus, capacity, "sum_stats_probe")
	if err != nil {
		return nil, fmt.Errorf("%w (%s variant: %w)", err, VariantCast, castErr)
	}
	t.variant, t.CastErr = VariantProbe, castErr.Error()
	return t, nil
}

func load(cpus, capacity int, prog string) (_ *Table, err error) {
	spec, err := loadStatstable()
	if err != nil {
		return nil, fmt.Errorf("reading stats table spec: %w", err)
	}
	for name := range spec.Programs {
		if name != prog && name != "count_hotplug" {
			delete(spec.Programs, name)
		}
	}
	spec.Maps["slots"].MaxEntries = uint32(capacity)
	if err := spec.Variables["nr_cpus"].Set(uint32(cpus)); err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) || errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: loading the stats table program: %w", ebpf.ErrNotSupported, err)
		}
		return nil, fmt.Errorf("loading the stats table program: %w", err)
	}
	t := &Table{coll: coll, prog: coll.Programs[prog], cpus: cpus}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	size := capacity * int(unsafe.Sizeof(Slot{}))
	pg := unix.Getpagesize()
	size = (size + pg - 1) / pg * pg
	t.mem, err = unix.Mmap(coll.Maps["slots"].FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the stats table: %w", err)
	}
	t.slots = unsafe.Slice((*Slot)(unsafe.Pointer(&t.mem[0])), capacity)
	t.hpMem, err = unix.Mmap(coll.Maps["hotplug"].FD(), 0, pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the hotplug counter: %w", err)
	}
	t.hotplugs = (*uint64)(unsafe.Pointer(&t.hpMem[0]))
	t.hpLink, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "cpuhp_enter", Program: coll.Programs["count_hotplug"]})
	if err != nil {
		return nil, fmt.Errorf("%w: attaching the CPU hotplug counter to raw tracepoint cpuhp_enter: %w", ebpf.ErrNotSupported, err)
	}
	t.attr = bpfsys.TestRunAttr{ProgFD: uint32(t.prog.FD()), CtxSizeIn: uint32(unsafe.Sizeof(args{})), CtxIn: uint64(uintptr(unsafe.Pointer(&t.args)))}
	return t, nil
}

// Variant is the program variant loaded (VariantCast or VariantProbe).
func (t *Table) Variant() string { return t.variant }

// Slots is the table, Capacity slots long, shared with the kernel: write
// each program's Stats into the first n slots, Run(n), read the sums.
func (t *Table) Slots() []Slot { return t.slots }

// Cap is the table's capacity.
func (t *Table) Cap() int { return len(t.slots) }

// ProgramID is the id of the table's program.
func (t *Table) ProgramID() (uint32, error) {
	info, err := t.prog.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	return uint32(id), nil
}

// Result is what a run says beside the slots.
type Result struct {
	// Bad is how many slots could not be summed (no FlagSummed).
	Bad int
}

// Run sums the first n slots: one bpf(BPF_PROG_TEST_RUN).
func (t *Table) Run(n int) (Result, error) {
	if n < 0 || n > len(t.slots) {
		return Result{}, fmt.Errorf("stats table: %d slots of %d", n, len(t.slots))
	}
	t.args = args{N: uint32(n)}
	t.attr.Retval = 0
	err := bpfsys.ProgTestRun(&t.attr)
	runtime.KeepAlive(t)
	if err != nil {
		return Result{}, fmt.Errorf("running the stats table program: %w", err)
	}
	if int32(t.attr.Retval) != 0 {
		return Result{}, fmt.Errorf("the stats table program could not learn the per-CPU offsets (returned %d)", int32(t.attr.Retval))
	}
	return Result{Bad: int(t.args.Bad)}, nil
}

// Hotplugs is how many CPU hotplug steps (cpuhp_enter) the kernel ran
// since Load: no syscall. A caller relying on per-CPU perf events (the
// load/unload watcher) must stop when it moves.
func (t *Table) Hotplugs() uint64 { return atomic.LoadUint64(t.hotplugs) }

// Close unmaps the slots and unloads the program and its maps.
func (t *Table) Close() error {
	var errs []error
	if t.hpLink != nil {
		errs = append(errs, t.hpLink.Close())
		t.hpLink = nil
	}
	if t.hpMem != nil {
		errs = append(errs, unix.Munmap(t.hpMem))
		t.hpMem, t.hotplugs = nil, nil
	}
	if t.mem != nil {
		errs = append(errs, unix.Munmap(t.mem))
		t.mem, t.slots = nil, nil
	}
	if t.coll != nil {
		t.coll.Close()
		t.coll = nil
	}
	return errors.Join(errs...)
}
