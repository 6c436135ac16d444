// Package profiler times every run of chosen BPF programs without the
// global stats tax: programs attached to the target program itself (as
// `bpftool prog profile` attaches its perf-counter readers) record each
// run's duration in a per-CPU log2 histogram. Only the profiled programs
// pay, and BPF_ENABLE_STATS can stay off.
//
// Two shapes: an fentry/fexit pair (the default), or one fsession program
// (BPF_TRACE_FSESSION, 7.x; the entry time in a cookie on the trampoline's
// stack), measured no cheaper. Either counts every run; the clock can be
// read on 1 run in N only (Options.SampleEvery), or the timing programs
// attached for windows only while a lone fentry counts (Options.Windowed):
// the exit hook, not the clock, is most of what a timed run costs.
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
	// Count is every run (exact, sampled or not).
	Count uint64 `json:"count"`
	// Timed is the runs whose durations are in Buckets and SumNs: Count
	// with every run timed (less the runs in flight at attach), about
	// Count/N when 1 in N is.
	Timed uint64 `json:"timed"`
	SumNs uint64 `json:"sum_ns"`
	MaxNs uint64 `json:"max_ns"`
}

// MeanNs is the timed runs' mean duration.
func (h *Histogram) MeanNs() float64 {
	if h.Timed == 0 {
		return 0
	}
	return float64(h.SumNs) / float64(h.Timed)
}

// Quantile estimates the q-quantile (0..1) in ns: the bucket holding the
// rank, linearly interpolated inside it and capped by the maximum. Its
// error is at most the bucket's width (a factor of 2); with 1 run in N
// timed, add the sampling error of a quantile from Timed samples.
func (h *Histogram) Quantile(q float64) float64 {
	if h.Timed == 0 {
		return 0
	}
	rank := q * float64(h.Timed)
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
	h.Timed -= min(prev.Timed, h.Timed)
	h.SumNs -= min(prev.SumNs, h.SumNs)
	return h
}

// Target names the profiled program.
type Target struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	// Func is the program's main function as its BTF names it: what the
	// tracing programs attach to.
	Func string `json:"func"`
}

// Shape is how the profiler is attached.
type Shape string

const (
	// ShapeAuto: the default, the pair (see AttachWith).
	ShapeAuto Shape = ""
	// ShapeSession: one BPF_TRACE_FSESSION program.
	ShapeSession Shape = "fsession"
	// ShapePair: an fentry and an fexit program.
	ShapePair Shape = "fentry/fexit"
	// shapeFloor: an empty fentry/fexit pair, for the cost test only.
	shapeFloor Shape = "floor"
	// shapeFloorEntry: an empty fentry alone, for the cost test only.
	shapeFloorEntry Shape = "floor-fentry"
)

// Options choose the shape and the clock's sampling.
type Options struct {
	Shape Shape
	// SampleEvery times 1 run in SampleEvery (a power of two; 0 and 1:
	// every run). Runs are counted exactly either way.
	SampleEvery uint32
	// Windowed counts every run with an fentry program of its own
	// (prof_count) and attaches the timing programs only between
	// SetTiming(true) and SetTiming(false): outside the windows a run pays
	// one fentry, no exit hook and no clock. SampleEvery must be 0 or 1.
	Windowed bool
	// Uncounted (with Windowed): no counting fentry; the timing programs
	// count the runs of the windows only, and outside them a run pays
	// nothing (counts must then be scaled by period/window, as sampled
	// stats are).
	Uncounted bool
	// skipExit: the session returns 1 at the entry of an untimed run
	// (cost test: does the kernel then skip the exit run?).
	skipExit bool
}

func (o Options) sampleMask() (uint64, error) {
	n := max(o.SampleEvery, 1)
	if n&(n-1) != 0 {
		return 0, fmt.Errorf("sample every %d runs: want a power of two", n)
	}
	if o.Windowed && n > 1 {
		return 0, fmt.Errorf("windowed timing times every run in its windows: sample every 1, not %d", n)
	}
	return uint64(n - 1), nil
}

// Profiler is the programs attached to one target program.
type Profiler struct {
	Target Target
	// Shape is the shape attached.
	Shape       Shape
	SampleEvery uint32
	Windowed    bool
	spec        *ebpf.CollectionSpec // maps and variables, no programs
	progSpecs   map[string]*ebpf.ProgramSpec
	timingNames []string
	maps        *ebpf.Collection // the histogram and .rodata: maps only
	hist        *ebpf.Map
	count       *ebpf.Program   // Windowed and counted: the counting fentry
	countLink   link.Link       // Windowed and counted
	timing      []*ebpf.Program // the fsession program, or the pair
	timingType  ebpf.AttachType // how to link timing: 0 for AttachTracing, else the raw fsession type
	timingUsed  bool            // timing was linked once: the next window reloads it
	links       []link.Link     // the timing programs' links while attached
}

// ErrNoBTF says the target has no BTF function info: the kernel attaches
// tracing programs to a BPF program only by its BTF function.
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

// Attach attaches with the default options: the fentry/fexit pair, every
// run timed.
func Attach(target *ebpf.Program) (*Profiler, error) {
	return AttachWith(target, Options{})
}

// AttachWith loads and attaches the profiler to target. A kernel that
// refuses tracing BPF programs fails here with its errno (EPERM on the CI
// host), a target without BTF with ErrNoBTF.
func AttachWith(target *ebpf.Program, o Options) (*Profiler, error) {
	t, err := TargetOf(target)
	if err != nil {
		return nil, err
	}
	mask, err := o.sampleMask()
	if err != nil {
		return nil, err
	}
	p := &Profiler{Target: t, SampleEvery: uint32(mask + 1), Windowed: o.Windowed}
	switch o.Shape {
	case ShapeAuto, ShapePair:
		// The pair, not fsession, by default: on 7.2 under TCG the
		// session costs as much or more per run (it is still run twice,
		// and its verifier wants 0 from the entry run, so an untimed run
		// cannot skip the exit run); the pair also works on older kernels.
		err = p.load(target, o, ShapePair, mask)
	case ShapeSession, shapeFloor, shapeFloorEntry:
		err = p.load(target, o, o.Shape, mask)
	default:
		err = fmt.Errorf("unknown profiler shape %q", o.Shape)
	}
	if err == nil && !o.Windowed {
		err = p.SetTiming(true)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// load creates the maps, loads the shape's timing programs (and links
// prof_count when windowed and counted); SetTiming links the timing ones.
func (p *Profiler) load(target *ebpf.Program, o Options, shape Shape, mask uint64) error {
	p.Shape = shape
	s, err := loadProfiler()
	if err != nil {
		return fmt.Errorf("reading profiler spec: %w", err)
	}
	if err := s.Variables["sample_mask"].Set(mask); err != nil {
		return fmt.Errorf("setting sample_mask: %w", err)
	}
	counted := o.Windowed && !o.Uncounted
	if err := s.Variables["timing_only"].Set(boolByte(counted)); err != nil {
		return fmt.Errorf("setting timing_only: %w", err)
	}
	switch shape {
	case ShapePair:
		p.timingNames = []string{"prof_entry", "prof_exit"}
	case shapeFloor:
		p.timingNames = []string{"floor_entry", "floor_exit"}
	case shapeFloorEntry:
		p.timingNames = []string{"floor_entry"}
	case ShapeSession:
		p.timingNames = []string{"prof_session"}
		if o.skipExit {
			p.timingNames = []string{"prof_session_skip"}
		}
	}
	p.progSpecs = s.Programs
	s.Programs = map[string]*ebpf.ProgramSpec{}
	p.spec = s
	coll, err := ebpf.NewCollection(s) // the maps
	if err != nil {
		return fmt.Errorf("creating the profiler's maps: %w", err)
	}
	p.maps, p.hist = coll, coll.Maps["hist"]
	if err := p.loadTiming(target); err != nil {
		return err
	}
	if counted {
		if p.count, err = p.loadOne("prof_count", target); err != nil {
			return err
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: p.count})
		if err != nil {
			return fmt.Errorf("attaching fentry to program %d (%s): %w", p.Target.ID, p.Target.Func, err)
		}
		p.countLink = l
	}
	return nil
}

// loadTiming loads the timing programs against target. A tracing program
// aimed at a BPF program attaches once: the kernel refuses to link it again
// after its link closed (EINVAL), so every window loads them anew.
func (p *Profiler) loadTiming(target *ebpf.Program) error {
	for _, prog := range p.timing {
		prog.Close()
	}
	p.timing, p.timingUsed = nil, false
	if p.Shape == ShapeSession {
		prog, at, err := loadSession(p.progSpecs[p.timingNames[0]], p.maps, target, p.Target)
		if err != nil {
			return err
		}
		p.timing, p.timingType = []*ebpf.Program{prog}, at
		return nil
	}
	for _, name := range p.timingNames {
		prog, err := p.loadOne(name, target)
		if err != nil {
			return err
		}
		p.timing = append(p.timing, prog)
	}
	return nil
}

// loadOne loads one program of the spec against target, on the maps.
func (p *Profiler) loadOne(name string, target *ebpf.Program) (*ebpf.Program, error) {
	s := p.spec.Copy()
	ps := p.progSpecs[name].Copy()
	ps.AttachTarget = target
	ps.AttachTo = p.Target.Func
	s.Programs = map[string]*ebpf.ProgramSpec{name: ps}
	coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{MapReplacements: p.maps.Maps})
	if err != nil {
		return nil, refusal(p.Target, "fentry/fexit", err)
	}
	defer coll.Close()
	return coll.DetachProgram(name), nil
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// SetTiming attaches (on) or detaches the timing programs. Without
// Options.Windowed they stay attached from AttachWith to Close. Each change
// rewrites the target's trampoline (text patching), and each window after
// the first loads the timing programs again (see loadTiming): call it per
// window, not per run.
func (p *Profiler) SetTiming(on bool) error {
	if !on {
		for _, l := range p.links {
			l.Close()
		}
		p.links = nil
		return nil
	}
	if len(p.links) > 0 {
		return nil
	}
	if p.timingUsed {
		target, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.Target.ID))
		if err != nil {
			return fmt.Errorf("reopening program %d for a timing window: %w", p.Target.ID, err)
		}
		err = p.loadTiming(target)
		target.Close()
		if err != nil {
			return err
		}
	}
	p.timingUsed = true
	for _, prog := range p.timing {
		var l link.Link
		var err error
		if p.timingType != 0 {
			l, err = link.AttachRawLink(link.RawLinkOptions{Program: prog, Attach: p.timingType})
		} else {
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		}
		if err != nil {
			p.SetTiming(false)
			return fmt.Errorf("attaching %s to program %d (%s): %w", p.Shape, p.Target.ID, p.Target.Func, err)
		}
		p.links = append(p.links, l)
	}
	return nil
}

func refusal(t Target, what string, err error) error {
	if errors.Is(err, unix.EPERM) {
		// cilium/ebpf's hint says MEMLOCK; here it is the kernel
		// refusing the trampoline (the CI host's 6.18 does).
		return fmt.Errorf("the kernel refuses %s on program %d (%s): %w", what, t.ID, t.Func, unix.EPERM)
	}
	return fmt.Errorf("loading %s on program %d (%s): %w", what, t.ID, t.Func, err)
}

// AttachID attaches to the program with the given id.
func AttachID(id uint32, o Options) (*Profiler, error) {
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, fmt.Errorf("opening program %d: %w", id, err)
	}
	defer prog.Close() // the loaded programs keep their own reference
	return AttachWith(prog, o)
}

// Read sums the per-CPU histograms: cumulative since Attach.
func (p *Profiler) Read() (Histogram, error) {
	var per []profilerHist
	if err := p.hist.Lookup(uint32(0), &per); err != nil {
		return Histogram{}, fmt.Errorf("reading the histogram of program %d: %w", p.Target.ID, err)
	}
	var h Histogram
	for _, c := range per {
		for i := range h.Buckets {
			h.Buckets[i] += c.Buckets[i]
		}
		h.Count += c.Runs
		h.Timed += c.Timed
		h.SumNs += c.SumNs
		h.MaxNs = max(h.MaxNs, c.MaxNs)
	}
	return h, nil
}

// ProgramIDs are the ids of the profiler's own programs (the agent leaves
// them out of selection, so it never profiles its profiler).
func (p *Profiler) ProgramIDs() []uint32 {
	var out []uint32
	progs := append([]*ebpf.Program{p.count}, p.timing...)
	for _, prog := range progs {
		if prog == nil {
			continue
		}
		if info, err := prog.Info(); err == nil {
			if id, ok := info.ID(); ok {
				out = append(out, uint32(id))
			}
		}
	}
	return out
}

// Close detaches and unloads the profiler; a half-attached one too.
func (p *Profiler) Close() error {
	p.SetTiming(false)
	if p.countLink != nil {
		p.countLink.Close()
		p.countLink = nil
	}
	for _, prog := range append([]*ebpf.Program{p.count}, p.timing...) {
		if prog != nil {
			prog.Close()
		}
	}
	if p.maps != nil {
		p.maps.Close()
	}
	p.maps, p.hist, p.count, p.timing, p.timingType = nil, nil, nil, nil, 0
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
	return loadNamedTarget("timed_target", loops)
}

func loadNamedTarget(name string, loops uint32) (*TimedTarget, error) {
	spec, err := loadProfiler()
	if err != nil {
		return nil, fmt.Errorf("reading profiler spec: %w", err)
	}
	for n := range spec.Programs {
		if n != name {
			delete(spec.Programs, n)
		}
	}
	if err := spec.Variables["loops"].Set(loops); err != nil {
		return nil, fmt.Errorf("setting loops: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("loading the timed target: %w", err)
	}
	return &TimedTarget{Prog: coll.Programs[name], coll: coll}, nil
}

// Trigger runs the target exactly n times, one BPF_PROG_TEST_RUN each (a
// test run of one run is never cut short by a signal and repeated).
func (t *TimedTarget) Trigger(n int) error {
	for range n {
		if _, err := t.Prog.Run(&ebpf.RunOptions{Data: make([]byte, 14), Repeat: 1}); err != nil {
			return fmt.Errorf("test-running the timed target: %w", err)
		}
	}
	return nil
}

// Fire runs the target n times in one BPF_PROG_TEST_RUN and returns the
// kernel's mean ns per run. A signal cuts the test run short and it is
// repeated: the target may run more than n times (use Trigger to count).
func (t *TimedTarget) Fire(n int) (float64, error) {
	_, d, err := t.Prog.Benchmark(make([]byte, 14), n, nil)
	if err != nil {
		return 0, fmt.Errorf("test-running the timed target: %w", err)
	}
	return float64(d.Nanoseconds()), nil
}

// Close unloads the target.
func (t *TimedTarget) Close() error { t.coll.Close(); return nil }
