// Package profiler times every run of chosen BPF programs without the
// global stats tax: an fentry/fexit pair attached to the target program
// itself (as `bpftool prog profile` attaches its perf-counter readers)
// records each run's duration in a per-CPU log2 histogram. Only the
// profiled programs pay, and BPF_ENABLE_STATS can stay off.
package profiler

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Buckets is the histogram's size: bucket b counts runs that took
// [2^b, 2^(b+1)) ns (bucket 0 also 0 ns).
const Buckets = 64

// Histogram is a profiled program's run durations, summed over CPUs.
type Histogram struct {
	Buckets [Buckets]uint64 `json:"buckets"`
	Count   uint64          `json:"count"`
	SumNs   uint64          `json:"sum_ns"`
	MaxNs   uint64          `json:"max_ns"`
}

// Quantile estimates the q-quantile (0..1) in ns: the bucket holding the
// rank, linearly interpolated inside it and capped by the maximum. Its
// error is at most the bucket's width (a factor of 2).
func (h *Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var seen float64
	for b, n := range h.Buckets {
		if n == 0 {
			continue
		}
		if seen+float64(n) >= rank {
			lo, hi := BucketBounds(b)
			v := lo + (hi-lo)*(rank-seen)/float64(n)
			return math.Min(v, float64(h.MaxNs))
		}
		seen += float64(n)
	}
	return float64(h.MaxNs)
}

// BucketBounds is bucket b's range in ns: [lo, hi).
func BucketBounds(b int) (lo, hi float64) {
	if b == 0 {
		return 0, 2
	}
	return math.Ldexp(1, b), math.Ldexp(1, b+1)
}

// Sub is h - prev per field (a window's histogram from two cumulative reads).
func (h Histogram) Sub(prev Histogram) Histogram {
	for i := range h.Buckets {
		h.Buckets[i] -= min(prev.Buckets[i], h.Buckets[i])
	}
	h.Count -= min(prev.Count, h.Count)
	h.SumNs -= min(prev.SumNs, h.SumNs)
	return h
}

// Target names the profiled program.
type Target struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	// Func is the program's main function as its BTF names it: what the
	// fentry/fexit pair attaches to.
	Func string `json:"func"`
}

// Profiler is an fentry/fexit pair attached to one target program.
type Profiler struct {
	Target Target
	objs   profObjects
	links  []link.Link
}

type profObjects struct {
	Entry *ebpf.Program `ebpf:"prof_entry"`
	Exit  *ebpf.Program `ebpf:"prof_exit"`
	Hist  *ebpf.Map     `ebpf:"hist"`
}

// ErrNoBTF says the target has no BTF function info: the kernel attaches
// fentry/fexit to a BPF program only by its BTF function.
var ErrNoBTF = errors.New("program has no BTF function info (loaded without BTF): fentry/fexit cannot name its function")

// TargetOf reads what Attach needs from a program: id, name and the name of
// its main function from BTF func info.
func TargetOf(prog *ebpf.Program) (Target, error) {
	info, err := prog.Info()
	if err != nil {
		return Target{}, fmt.Errorf("reading program info: %w", err)
	}
	t := Target{Name: info.Name}
	if id, ok := info.ID(); ok {
		t.ID = uint32(id)
	}
	fos, err := info.FuncInfos()
	if err != nil || len(fos) == 0 || fos[0].Func == nil {
		return t, fmt.Errorf("program %d (%s): %w", t.ID, t.Name, ErrNoBTF)
	}
	t.Func = fos[0].Func.Name
	return t, nil
}

// Attach loads the pair against target and attaches it. A kernel that
// refuses tracing BPF programs fails here with its errno (EPERM on the CI
// host), a target without BTF with ErrNoBTF.
func Attach(target *ebpf.Program) (*Profiler, error) {
	t, err := TargetOf(target)
	if err != nil {
		return nil, err
	}
	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("reading profiler spec: %w", err)
	}
	for _, name := range []string{"prof_entry", "prof_exit"} {
		ps := spec.Programs[name]
		ps.AttachTarget = target
		ps.AttachTo = t.Func
	}
	p := &Profiler{Target: t}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) {
			// cilium/ebpf's hint says MEMLOCK; here it is the kernel
			// refusing the trampoline (the CI host's 6.18 does).
			return nil, fmt.Errorf("the kernel refuses fentry/fexit on program %d (%s): %w", t.ID, t.Func, unix.EPERM)
		}
		return nil, fmt.Errorf("loading fentry/fexit on program %d (%s): %w", t.ID, t.Func, err)
	}
	for _, prog := range []*ebpf.Program{p.objs.Entry, p.objs.Exit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attaching fentry/fexit to program %d (%s): %w", t.ID, t.Func, err)
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

// AttachID attaches to the program with the given id.
func AttachID(id uint32) (*Profiler, error) {
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, fmt.Errorf("opening program %d: %w", id, err)
	}
	defer prog.Close() // the loaded pair keeps its own reference
	return Attach(prog)
}

// Read sums the per-CPU histograms: cumulative since Attach.
func (p *Profiler) Read() (Histogram, error) {
	var per []profilerHist
	if err := p.objs.Hist.Lookup(uint32(0), &per); err != nil {
		return Histogram{}, fmt.Errorf("reading the histogram of program %d: %w", p.Target.ID, err)
	}
	var h Histogram
	for _, c := range per {
		for i := range h.Buckets {
			h.Buckets[i] += c.Buckets[i]
		}
		h.Count += c.Count
		h.SumNs += c.SumNs
		h.MaxNs = max(h.MaxNs, c.MaxNs)
	}
	return h, nil
}

// ProgramIDs are the ids of the pair's own programs (the agent leaves them
// out of selection, so it never profiles its profiler).
func (p *Profiler) ProgramIDs() []uint32 {
	var out []uint32
	for _, prog := range []*ebpf.Program{p.objs.Entry, p.objs.Exit} {
		if info, err := prog.Info(); err == nil {
			if id, ok := info.ID(); ok {
				out = append(out, uint32(id))
			}
		}
	}
	return out
}

// Close detaches and unloads the pair.
func (p *Profiler) Close() error {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	// Close is nil-safe on programs and maps: a half-loaded pair closes too.
	p.objs.Entry.Close()
	p.objs.Exit.Close()
	p.objs.Hist.Close()
	return nil
}

// TimedTarget is the test target: a socket filter whose run is loops
// iterations of bpf_loop, run by BPF_PROG_TEST_RUN.
type TimedTarget struct {
	Prog *ebpf.Program
	coll *ebpf.Collection
}

// LoadTimedTarget loads a timed target of loops iterations.
func LoadTimedTarget(loops uint32) (*TimedTarget, error) {
	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("reading profiler spec: %w", err)
	}
	delete(spec.Programs, "prof_entry")
	delete(spec.Programs, "prof_exit")
	if err := spec.Variables["loops"].Set(loops); err != nil {
		return nil, fmt.Errorf("setting loops: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("loading the timed target: %w", err)
	}
	return &TimedTarget{Prog: coll.Programs["timed_target"], coll: coll}, nil
}

// Fire runs the target n times in one BPF_PROG_TEST_RUN and returns the
// kernel's mean ns per run.
func (t *TimedTarget) Fire(n int) (float64, error) {
	_, d, err := t.Prog.Benchmark(make([]byte, 14), n, nil)
	if err != nil {
		return 0, fmt.Errorf("test-running the timed target: %w", err)
	}
	return float64(d.Nanoseconds()), nil
}

// Close unloads the target.
func (t *TimedTarget) Close() error { t.coll.Close(); return nil }
