// Package bench measures what each attach type adds to the call it is
// attached to, like the kernel's selftests/bpf `bench trig-*`: the trigger
// rate without and with the catalog probe attached, in repeated rounds, from
// one thread pinned to one CPU. The trigger is the getpgid syscall (what an
// application pays) or an in-kernel driver (the dispatch cost alone).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/bpfleet/bpfleet/probes/features"
	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Auto measures each attach type in kernel mode where the kernel has an
// in-kernel trigger for it, else in syscall mode.
const Auto catalog.Mode = "auto"

// Stats says whether the bench holds BPF_ENABLE_STATS while measuring.
type Stats string

const (
	StatsOff  Stats = "off"  // do not enable stats (they may still be on: see Result.StatsEnabled)
	StatsOn   Stats = "on"   // hold a BPF_ENABLE_STATS fd while measuring
	StatsBoth Stats = "both" // measure everything twice: off, then on
)

// Options configure a bench run. The zero value measures every attach type
// in Auto mode with the defaults below.
type Options struct {
	AttachTypes []catalog.AttachType // nil: catalog.All()
	Mode        catalog.Mode         // catalog.Syscall, catalog.Kernel or Auto ("": Auto)
	// Calls per measurement (0: DefaultSyscallCalls or DefaultKernelCalls).
	Calls  int
	Rounds int   // 0: DefaultRounds
	Stats  Stats // "": StatsOff
	Batch  int   // kernel mode: calls per driver run (0: catalog.DefaultBatch)
	// Progress, if set, is called after each measurement step.
	Progress func(done, total int, step string)

	calibrate bool // Calibrate's small call counts
}

// Defaults.
const (
	DefaultSyscallCalls = 200_000
	DefaultKernelCalls  = 2_000_000
	DefaultRounds       = 5

	calibrateSyscallCalls = 10_000
	calibrateKernelCalls  = 100_000
	calibrateRounds       = 3
)

// Result is one attach type's figures. Medians are over the rounds; each
// round measures the baseline and the probe back to back.
type Result struct {
	AttachType string `json:"attach_type"`
	Mode       string `json:"mode"`
	Supported  bool   `json:"supported"`
	Reason     string `json:"reason,omitempty"`
	// Inconclusive is set when the failure says nothing about the kernel
	// (a missing tracefs mount or privilege; features.Inconclusive).
	Inconclusive bool   `json:"inconclusive,omitempty"`
	Target       string `json:"target,omitempty"`
	// StatsEnabled is whether the kernel accounted run time to the probe
	// during the measurement (observed, not requested).
	StatsEnabled bool `json:"stats_enabled"`
	Calls        int  `json:"calls"`
	Rounds       int  `json:"rounds"`

	BaselineNsPerCall float64 `json:"baseline_ns_per_call"`
	NsPerCall         float64 `json:"ns_per_call"`
	OverheadNs        float64 `json:"overhead_ns"`
	// The spread of the per-round overhead.
	OverheadNsMin float64 `json:"overhead_ns_min"`
	OverheadNsMax float64 `json:"overhead_ns_max"`

	BaselineOpsPerSec float64 `json:"baseline_ops_per_sec"`
	OpsPerSec         float64 `json:"ops_per_sec"`
	DiffPct           float64 `json:"diff_pct"`
	// ProgRunNs is the kernel's run_time_ns / run_cnt of the probe when
	// stats were on: the program body, without the attach type's dispatch.
	ProgRunNs float64 `json:"prog_run_ns,omitempty"`
	// RatioToRawTp is OverheadNs over raw_tp's in the same mode and stats
	// setting of the same run.
	RatioToRawTp float64 `json:"ratio_to_raw_tp,omitempty"`
}

// Report is a whole bench run.
type Report struct {
	Kernel  features.Kernel `json:"kernel"`
	CPU     int             `json:"cpu"`
	Results []Result        `json:"results"`
}

func (o Options) withDefaults() Options {
	if o.AttachTypes == nil {
		o.AttachTypes = catalog.All()
	}
	if o.Mode == "" {
		o.Mode = Auto
	}
	if o.Rounds <= 0 {
		o.Rounds = DefaultRounds
	}
	if o.Stats == "" {
		o.Stats = StatsOff
	}
	return o
}

func (o Options) calls(m catalog.Mode) int {
	switch {
	case o.Calls > 0:
		return o.Calls
	case m == catalog.Kernel && o.calibrate:
		return calibrateKernelCalls
	case m == catalog.Kernel:
		return DefaultKernelCalls
	case o.calibrate:
		return calibrateSyscallCalls
	}
	return DefaultSyscallCalls
}

// Validate names the first bad field.
func (o Options) Validate() error {
	switch o.Mode {
	case "", Auto, catalog.Syscall, catalog.Kernel:
	default:
		return fmt.Errorf("mode %q: want syscall, kernel or auto", o.Mode)
	}
	switch o.Stats {
	case "", StatsOff, StatsOn, StatsBoth:
	default:
		return fmt.Errorf("stats %q: want on, off or both", o.Stats)
	}
	if o.Calls < 0 || o.Rounds < 0 || o.Batch < 0 {
		return errors.New("calls, rounds and batch must not be negative")
	}
	return nil
}

// Run measures opts.AttachTypes. An attach type the kernel refuses is a
// Result with Supported false and the kernel's reason; Run fails only if
// it cannot measure at all (ctx done, thread pinning refused).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu, restore, err := pin()
	if err != nil {
		return nil, err
	}
	defer restore()

	statsRuns := []bool{opts.Stats == StatsOn}
	if opts.Stats == StatsBoth {
		statsRuns = []bool{false, true}
	}
	total := len(statsRuns) * len(opts.AttachTypes) * (opts.Rounds + 1)
	done := 0
	progress := func(step string) {
		done++
		if opts.Progress != nil {
			opts.Progress(done, total, step)
		}
	}

	rep := &Report{Kernel: features.ReadKernel(), CPU: cpu}
	for _, withStats := range statsRuns {
		var stats io.Closer
		if withStats {
			if stats, err = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
				return nil, fmt.Errorf("enabling BPF stats: %w", err)
			}
		}
		for _, t := range opts.AttachTypes {
			if err := ctx.Err(); err != nil {
				closeStats(stats)
				return rep, err
			}
			rep.Results = append(rep.Results, measure(ctx, t, opts, progress))
		}
		closeStats(stats)
	}
	addRatios(rep.Results)
	return rep, nil
}

func closeStats(c io.Closer) {
	if c != nil {
		c.Close()
	}
}

// pin binds the calling (locked) thread to the CPU it is on, so the rounds
// do not migrate; restore gives back the thread's original CPU set.
func pin() (cpu int, restore func(), err error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return 0, nil, fmt.Errorf("reading CPU affinity: %w", err)
	}
	cpu = currentCPU()
	if !orig.IsSet(cpu) {
		for cpu = 0; !orig.IsSet(cpu); cpu++ {
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return 0, nil, fmt.Errorf("pinning the trigger thread to CPU %d: %w", cpu, err)
	}
	return cpu, func() { unix.SchedSetaffinity(0, &orig) }, nil
}

func currentCPU() int {
	var cpu, node uint32
	// getcpu(2); unix has no wrapper.
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); e != 0 {
		return 0
	}
	return int(cpu)
}

// setUp loads the trigger and probe for t in mode m; Auto tries the
// in-kernel trigger first and falls back to the syscall.
func setUp(t catalog.AttachType, m catalog.Mode, batch int) (catalog.Mode, catalog.Trigger, *catalog.Probe, error) {
	if m == Auto {
		if trig, p, err := load(t, catalog.Kernel, batch); err == nil {
			return catalog.Kernel, trig, p, nil
		}
		m = catalog.Syscall
	}
	trig, p, err := load(t, m, batch)
	return m, trig, p, err
}

func load(t catalog.AttachType, m catalog.Mode, batch int) (catalog.Trigger, *catalog.Probe, error) {
	trig, err := catalog.NewTrigger(t, m, batch)
	if err != nil {
		return nil, nil, err
	}
	p, err := catalog.Load(t, m, unix.Gettid())
	if err == nil {
		err = p.Attach() // asked once here so a refusal is reported at load
	}
	if err != nil {
		trig.Close()
		if p != nil {
			p.Close()
		}
		return nil, nil, err
	}
	return trig, p, p.Detach()
}

// measure runs one warm-up and opts.Rounds rounds for t on the calling thread.
func measure(ctx context.Context, t catalog.AttachType, opts Options, progress func(string)) Result {
	res := Result{AttachType: string(t), Mode: string(opts.Mode), Rounds: opts.Rounds}
	fail := func(err error) Result {
		res.Reason = catalog.Reason(err)
		res.Inconclusive = ctx.Err() == nil && features.Inconclusive(err)
		for i := 0; i <= opts.Rounds; i++ {
			progress(string(t) + ": " + res.Reason)
		}
		return res
	}

	m, trig, p, err := setUp(t, opts.Mode, opts.Batch)
	res.Mode = string(m)
	if err != nil {
		return fail(err)
	}
	defer trig.Close()
	defer p.Close()
	calls := opts.calls(m)
	res.Mode, res.Calls, res.Target = string(m), calls, p.Target

	var base, with, over []float64
	var runs, runNs uint64
	for r := 0; r <= opts.Rounds; r++ { // round 0 warms up and is discarded
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		b, w, st, err := round(p, trig, calls)
		if err != nil {
			return fail(err)
		}
		if r > 0 {
			base, with, over = append(base, b), append(with, w), append(over, w-b)
			runs += st.RunCount
			runNs += uint64(st.Runtime)
		}
		progress(fmt.Sprintf("%s round %d/%d", t, r, opts.Rounds))
	}
	res.Supported = true
	res.Calls = calls
	res.BaselineNsPerCall = median(base)
	res.NsPerCall = median(with)
	res.OverheadNs = median(over)
	res.OverheadNsMin, res.OverheadNsMax = slices.Min(over), slices.Max(over)
	res.BaselineOpsPerSec = 1e9 / res.BaselineNsPerCall
	res.OpsPerSec = 1e9 / res.NsPerCall
	res.DiffPct = (res.OpsPerSec - res.BaselineOpsPerSec) / res.BaselineOpsPerSec * 100
	if runNs > 0 && runs > 0 {
		res.StatsEnabled = true
		res.ProgRunNs = float64(runNs) / float64(runs)
	}
	return res
}

// runStats is the kernel's stats delta of the probe over one round.
type runStats struct {
	RunCount uint64
	Runtime  time.Duration
}

// round times (in thread CPU time) calls triggered calls without the probe, then with it, and
// checks that the probe counted every call.
func round(p *catalog.Probe, trig catalog.Trigger, calls int) (baseNs, withNs float64, st runStats, err error) {
	if err := p.Detach(); err != nil {
		return 0, 0, st, err
	}
	start := threadTime()
	n, err := trig.Fire(calls)
	if err != nil {
		return 0, 0, st, err
	}
	baseNs = float64(threadTime()-start) / float64(n)

	if err := p.Attach(); err != nil {
		return 0, 0, st, err
	}
	if err := p.ResetHits(); err != nil {
		return 0, 0, st, err
	}
	before, err := p.Program().Stats()
	if err != nil {
		return 0, 0, st, fmt.Errorf("reading %s stats: %w", p.Type, err)
	}
	start = threadTime()
	n, err = trig.Fire(calls)
	if err != nil {
		return 0, 0, st, err
	}
	withNs = float64(threadTime()-start) / float64(n)
	hits, err := p.Hits()
	if err != nil {
		return 0, 0, st, err
	}
	after, err := p.Program().Stats()
	if err != nil {
		return 0, 0, st, fmt.Errorf("reading %s stats: %w", p.Type, err)
	}
	if err := p.Detach(); err != nil {
		return 0, 0, st, err
	}
	if hits != uint64(n) {
		return 0, 0, st, fmt.Errorf("probe on %s counted %d of %d calls", p.Target, hits, n)
	}
	return baseNs, withNs, runStats{after.RunCount - before.RunCount, after.Runtime - before.Runtime}, nil
}

// threadTime is the CPU time of the calling thread in ns: on a busy node
// the time the trigger thread spends preempted is not the probe's cost.
func threadTime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// addRatios sets RatioToRawTp for results measured like a raw_tp result of
// the same run (same mode and stats).
func addRatios(rs []Result) {
	for i := range rs {
		for _, ref := range rs {
			if ref.AttachType == string(catalog.RawTp) && ref.Supported && rs[i].Supported &&
				ref.Mode == rs[i].Mode && ref.StatsEnabled == rs[i].StatsEnabled && ref.OverheadNs > 0 {
				rs[i].RatioToRawTp = rs[i].OverheadNs / ref.OverheadNs
			}
		}
	}
}

// Calibrate is the agent's start-up measurement: every catalog attach type
// in Auto mode with few calls and rounds and stats as they are, stopping
// when budget (wall time) is spent. On the CI machines it takes about 0.4 s
// of CPU. It returns one Result per attach type; those the kernel refused
// or the budget did not reach have Supported false and the reason.
func Calibrate(ctx context.Context, budget time.Duration) ([]Result, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	rep, err := Run(ctx, Options{Mode: Auto, Rounds: calibrateRounds, calibrate: true})
	if rep == nil {
		return nil, err
	}
	out := rep.Results
	for _, t := range catalog.All()[len(out):] {
		out = append(out, Result{AttachType: string(t), Reason: fmt.Sprintf("not measured: calibration budget %s spent", budget)})
	}
	for i := range out {
		if !out[i].Supported && errors.Is(ctx.Err(), context.DeadlineExceeded) && out[i].Reason == context.DeadlineExceeded.Error() {
			out[i].Reason = fmt.Sprintf("not measured: calibration budget %s spent", budget)
		}
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return out, err
	}
	return out, nil
}
