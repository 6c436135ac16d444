package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/bpfleet/bpfleet/internal/sysfile"
	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// The stats tax is what BPF_ENABLE_STATS adds to one run of a program:
// while any holder keeps stats on, every run reads the clock twice and
// updates per-CPU counters. It is measured with stats off and on
// alternated in the same run (ABBA order, so a drifting machine biases
// neither side), on programs the bench controls:
//   - "xdp" and "tc": a no-op program run by BPF_PROG_TEST_RUN with a
//     large repeat count; the kernel times the loop, so the figure is the
//     dispatch plus the stats, without a syscall per run;
//   - each catalog attach type: its counting probe attached and fired by
//     the trigger, timed in thread CPU time per call.
//
// The "off" half only means something if stats really were off: the
// kernel's sysctl says whether it keeps them on, and an fd held by another
// process shows as run_cnt advancing while we hold none. Either way the
// figure is not a number but HeldElsewhere.

// Test-run kinds: the program types measured by BPF_PROG_TEST_RUN.
const (
	TaxXDP = "xdp"
	TaxTC  = "tc"
)

// HeldElsewhere is the reason of a tax that could not be measured because
// stats were on without us.
const HeldElsewhere = "not measurable: stats held elsewhere"

// ErrHeldElsewhere is returned (wrapped) when stats are on without the bench.
var ErrHeldElsewhere = errors.New(HeldElsewhere)

// TaxResult is the stats tax of one kind of program.
type TaxResult struct {
	// Kind is an attach type of the catalog (raw_tp, tp_btf, ...) or
	// TaxXDP / TaxTC.
	Kind string `json:"kind"`
	// Method is "test_run" or the trigger mode ("kernel", "syscall").
	Method   string `json:"method"`
	Measured bool   `json:"measured"`
	Reason   string `json:"reason,omitempty"`
	Rounds   int    `json:"rounds"`
	// Runs is the program runs per half round.
	Runs int `json:"runs"`
	// OffNs and OnNs are the median ns per run (per triggered call for a
	// probe) with stats off and on.
	OffNs float64 `json:"off_ns"`
	OnNs  float64 `json:"on_ns"`
	// TaxNs is the median over rounds of (on - off): what stats add to one
	// run; TaxNsMin..TaxNsMax is its spread over the rounds.
	TaxNs    float64 `json:"tax_ns"`
	TaxNsMin float64 `json:"tax_ns_min"`
	TaxNsMax float64 `json:"tax_ns_max"`
}

// TaxOptions configure MeasureTax. The zero value measures xdp, tc and
// every catalog attach type the kernel accepts, with the defaults below.
type TaxOptions struct {
	// AttachTypes are the trigger-measured kinds (nil: catalog.All(); an
	// empty non-nil slice: none).
	AttachTypes []catalog.AttachType
	// NoTestRun skips xdp and tc.
	NoTestRun bool
	Mode      catalog.Mode // trigger mode for attach types ("": Auto)
	Repeat    int          // test_run repeat per half round (0: DefaultTaxRepeat)
	Calls     int          // triggered calls per half round (0: by mode, as Run)
	Rounds    int          // 0: DefaultRounds
	// ProcRoot is where procfs is mounted ("": /proc), for the sysctl.
	ProcRoot string
}

// DefaultTaxRepeat is the test_run repeat count of one half round: long
// enough (~10 ms) that the syscall and timer granularity vanish.
const DefaultTaxRepeat = 100_000

// StatsSysctl reads kernel.bpf_stats_enabled under procRoot ("": /proc):
// the sysctl's own setting (BPF_ENABLE_STATS fds do not show in it), -1
// when unreadable.
func StatsSysctl(procRoot string) int {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := sysfile.Read(procRoot + "/sys/kernel/bpf_stats_enabled") // no poller: see sysfile
	if err != nil {
		return -1
	}
	return sysfile.Int(b)
}

// MeasureTax measures the stats tax. The caller must hold no
// BPF_ENABLE_STATS fd of its own (the agent releases its holder first).
// A kind the kernel refuses, or that stats held elsewhere make
// unmeasurable, is a result with Measured false and the reason; the error
// is only for ctx or thread pinning.
func MeasureTax(ctx context.Context, opts TaxOptions) ([]TaxResult, error) {
	if opts.AttachTypes == nil {
		opts.AttachTypes = catalog.All()
	}
	if opts.Mode == "" {
		opts.Mode = Auto
	}
	if opts.Repeat <= 0 {
		opts.Repeat = DefaultTaxRepeat
	}
	if opts.Rounds <= 0 {
		opts.Rounds = DefaultRounds
	}
	var kinds []string
	if !opts.NoTestRun {
		kinds = append(kinds, TaxXDP, TaxTC)
	}
	for _, t := range opts.AttachTypes {
		kinds = append(kinds, string(t))
	}
	out := make([]TaxResult, 0, len(kinds))
	if StatsSysctl(opts.ProcRoot) > 0 {
		for _, k := range kinds {
			out = append(out, TaxResult{Kind: k, Reason: HeldElsewhere + " (kernel.bpf_stats_enabled=1)"})
		}
		return out, nil
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, restore, err := pin()
	if err != nil {
		return nil, err
	}
	defer restore()

	for i, k := range kinds {
		if err := ctx.Err(); err != nil {
			// What was measured stands; the rest says why it is missing.
			reason := "not measured: " + err.Error()
			if errors.Is(err, context.DeadlineExceeded) {
				reason = "not measured: time budget spent"
			}
			for _, k := range kinds[i:] {
				out = append(out, TaxResult{Kind: k, Reason: reason})
			}
			return out, err
		}
		var r TaxResult
		switch k {
		case TaxXDP, TaxTC:
			r = taxTestRun(ctx, k, opts)
		default:
			r = taxProbe(ctx, catalog.AttachType(k), opts)
		}
		out = append(out, r)
	}
	return out, nil
}

// noopSpec is a program that returns at once: XDP_PASS, TC_ACT_OK.
func noopSpec(kind string) *ebpf.ProgramSpec {
	typ, ret := ebpf.XDP, int32(2) // XDP_PASS
	if kind == TaxTC {
		typ, ret = ebpf.SchedCLS, 0 // TC_ACT_OK
	}
	return &ebpf.ProgramSpec{
		Name: "bpfleet_tax_" + kind, Type: typ, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()},
	}
}

// half is one timed half round: ns per run and the program's run_cnt delta.
type half func() (nsPerRun float64, runs uint64, err error)

// alternate runs rounds+1 ABBA rounds of off and on (round 0 warms up),
// holding a BPF_ENABLE_STATS fd during "on". It fails with ErrHeldElsewhere
// when the off half saw runs counted.
func alternate(ctx context.Context, rounds int, h half) (off, on, tax []float64, err error) {
	measureOn := func() (float64, error) {
		fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			return 0, fmt.Errorf("enabling BPF stats: %w", err)
		}
		ns, runs, err := h()
		fd.Close()
		if err == nil && runs == 0 {
			err = errors.New("stats on, yet the kernel counted no run")
		}
		return ns, err
	}
	measureOff := func() (float64, error) {
		ns, runs, err := h()
		if err == nil && runs > 0 {
			err = fmt.Errorf("%w (run_cnt grew by %d while bpfleet held no stats fd)", ErrHeldElsewhere, runs)
		}
		return ns, err
	}
	for r := 0; r <= rounds; r++ {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, err
		}
		var a, b float64
		var err error
		if r%2 == 0 {
			if a, err = measureOff(); err == nil {
				b, err = measureOn()
			}
		} else {
			if b, err = measureOn(); err == nil {
				a, err = measureOff()
			}
		}
		if err != nil {
			return nil, nil, nil, err
		}
		if r > 0 {
			off, on, tax = append(off, a), append(on, b), append(tax, b-a)
		}
	}
	return off, on, tax, nil
}

// measure alternates h with stats off and on (alternate) and fills r from
// what it measured, or says why it could not.
func (r TaxResult) measure(ctx context.Context, rounds int, h half) TaxResult {
	off, on, tax, err := alternate(ctx, rounds, h)
	if err != nil {
		r.Reason = taxReason(err)
		return r
	}
	r.fill(off, on, tax)
	return r
}

func (r *TaxResult) fill(off, on, tax []float64) {
	r.Measured = true
	r.OffNs, r.OnNs, r.TaxNs = median(off), median(on), median(tax)
	r.TaxNsMin, r.TaxNsMax = slices.Min(tax), slices.Max(tax)
}

func taxReason(err error) string {
	if errors.Is(err, ErrHeldElsewhere) {
		return HeldElsewhere
	}
	return catalog.Reason(err)
}

func taxTestRun(ctx context.Context, kind string, opts TaxOptions) TaxResult {
	res := TaxResult{Kind: kind, Method: "test_run", Rounds: opts.Rounds, Runs: opts.Repeat}
	prog, err := ebpf.NewProgram(noopSpec(kind))
	if err != nil {
		res.Reason = fmt.Sprintf("loading a no-op %s program: %v", kind, err)
		return res
	}
	defer prog.Close()
	pkt := make([]byte, 64) // an Ethernet frame's worth: test_run wants at least ETH_HLEN
	h := func() (float64, uint64, error) {
		before, err := prog.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s stats: %w", kind, err)
		}
		_, d, err := prog.Benchmark(pkt, opts.Repeat, nil)
		if err != nil {
			return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN of %s: %w", kind, err)
		}
		after, err := prog.Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s stats: %w", kind, err)
		}
		return float64(d.Nanoseconds()), after.RunCount - before.RunCount, nil
	}
	return res.measure(ctx, opts.Rounds, h)
}

func taxProbe(ctx context.Context, t catalog.AttachType, opts TaxOptions) TaxResult {
	res := TaxResult{Kind: string(t), Method: string(opts.Mode), Rounds: opts.Rounds}
	m, trig, p, err := setUp(t, opts.Mode, 0)
	res.Method = string(m)
	if err != nil {
		res.Reason = catalog.Reason(err)
		return res
	}
	defer trig.Close()
	defer p.Close()
	if err := p.Attach(); err != nil {
		res.Reason = catalog.Reason(err)
		return res
	}
	calls := Options{Calls: opts.Calls, calibrate: true}.calls(m)
	res.Runs = calls
	h := func() (float64, uint64, error) {
		before, err := p.Program().Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s stats: %w", t, err)
		}
		start := threadTime()
		n, err := trig.Fire(calls)
		if err != nil {
			return 0, 0, err
		}
		ns := float64(threadTime()-start) / float64(n)
		after, err := p.Program().Stats()
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s stats: %w", t, err)
		}
		return ns, after.RunCount - before.RunCount, nil
	}
	return res.measure(ctx, opts.Rounds, h)
}

// WriteTaxTable prints the tax results as a Markdown table.
func WriteTaxTable(w io.Writer, rs []TaxResult) error {
	var b strings.Builder
	b.WriteString("| program | method | ns/run stats off | stats on | stats tax ns/run | spread |\n| --- | --- | --- | --- | --- | --- |\n")
	var not []TaxResult
	for _, r := range rs {
		if !r.Measured {
			not = append(not, r)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %+.1f | %.1f..%.1f |\n", r.Kind, r.Method, r.OffNs, r.OnNs, r.TaxNs, r.TaxNsMin, r.TaxNsMax)
	}
	if len(not) > 0 {
		b.WriteString("\nstats tax not measured:\n")
		for _, r := range not {
			fmt.Fprintf(&b, "  %-12s %s\n", r.Kind, r.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
