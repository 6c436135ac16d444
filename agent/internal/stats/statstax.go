package stats

import (
	"slices"
	"sort"
	"time"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/internal/config"
	"golang.org/x/sys/unix"
)

// StatsCost is the measured stats cost of one kind of program on this node
// (calibration, probes/bench MeasureTax): ns that stats accounting adds to
// one run.
type StatsCost struct {
	// Kind is an attach type the bench measured with its trigger (raw_tp,
	// tp_btf, tracepoint, fentry, ...) or "xdp" / "tc" (a no-op program
	// through BPF_PROG_TEST_RUN).
	Kind     string  `json:"kind"`
	Method   string  `json:"method"`
	Measured bool    `json:"measured"`
	Reason   string  `json:"reason,omitempty"`
	TaxNs    float64 `json:"tax_ns"`
	TaxNsMin float64 `json:"tax_ns_min"`
	TaxNsMax float64 `json:"tax_ns_max"`
}

// StatsTax is what BPF run-time stats accounting costs this node: the sum
// over programs of runs per second × the measured stats cost per run of
// the program's kind, in CPU seconds per second (1.0 = one whole CPU).
type StatsTax struct {
	// Known is false when there is no figure; Reason says why.
	Known  bool   `json:"known"`
	Reason string `json:"reason,omitempty"`
	// CPUShare is the tax paid now: AlwaysCPUShare × Duty.
	CPUShare float64 `json:"cpu_share"`
	// AlwaysCPUShare is what the tax would be with stats always on.
	AlwaysCPUShare float64 `json:"always_cpu_share"`
	// Duty is the fraction of time the agent holds stats on: 1 always,
	// window/period sampled, 0 off or when the agent leaves stats alone
	// (one-shot list: then AlwaysCPUShare is the figure).
	Duty float64 `json:"duty"`
	// RatesSince says where the run rates come from: "interval" (exact),
	// "windows" (sampled, scaled) or "load" (one scan: runs since load).
	RatesSince string `json:"rates_since,omitempty"`
	// ByProgramType splits AlwaysCPUShare and CPUShare by program type.
	ByProgramType []ProgramTypeTax `json:"by_program_type,omitempty"`
}

// ProgramTypeTax is the stats tax of the programs of one type.
type ProgramTypeTax struct {
	ProgramType string  `json:"program_type"`
	Programs    int     `json:"programs"`
	RunsPerSec  float64 `json:"runs_per_sec"`
	// CostNs is the stats cost per run used, averaged over the type's runs.
	CostNs float64 `json:"cost_ns"`
	// Source names the figure used: a measured kind, or "raw_tp (nearest)"
	// / "xdp (generic)" where the kind was not measured.
	Source         string  `json:"source"`
	AlwaysCPUShare float64 `json:"always_cpu_share"`
	CPUShare       float64 `json:"cpu_share"`
}

// skbTypes are program types whose runs go through the same bpf_prog_run
// path as the tc test run.
var skbTypes = []string{"sched_cls", "sched_act", "socket_filter", "cgroup_skb", "sk_skb", "sk_msg",
	"lwt_in", "lwt_out", "lwt_xmit", "lwt_seg6local", "flow_dissector", "sk_reuseport", "netfilter"}

// tracingTypes are dispatched like raw_tp when their own attach type was not
// measured (kprobes on a kernel without kprobes, fentry where refused).
var tracingTypes = []string{"tracing", "raw_tracepoint", "raw_tracepoint_writable", "tracepoint", "kprobe", "perf_event", "lsm"}

// costFor picks the stats cost per run for p: its attach type's own
// figure, else the figure of the nearest measured kind.
func costFor(p *prog.Program, costs map[string]float64) (float64, string, bool) {
	if ns, ok := costs[p.AttachType]; ok {
		return ns, p.AttachType, true
	}
	switch {
	case p.Type == "xdp":
		if ns, ok := costs["xdp"]; ok {
			return ns, "xdp", true
		}
	case slices.Contains(skbTypes, p.Type) || (len(p.Type) > 7 && p.Type[:7] == "cgroup_"):
		if ns, ok := costs["tc"]; ok {
			return ns, "tc", true
		}
	case slices.Contains(tracingTypes, p.Type):
		if ns, ok := costs["raw_tp"]; ok {
			return ns, "raw_tp (nearest)", true
		}
	}
	if ns, ok := costs["xdp"]; ok {
		return ns, "xdp (generic)", true
	}
	return 0, "", false
}

// ComputeTax sums runs/s × cost per run over programs. dt 0 (one scan)
// takes each program's runs since its load.
func ComputeTax(progs []*prog.ProgramStat, costs []StatsCost, st StatsState, dt time.Duration, now time.Time) StatsTax {
	byKind := map[string]float64{}
	elsewhere := false
	for _, c := range costs {
		if c.Measured {
			byKind[c.Kind] = c.TaxNs
		} else if len(c.Reason) >= len("not measurable") && c.Reason[:len("not measurable")] == "not measurable" {
			elsewhere = true
		}
	}
	tax, done := taxHead(st, byKind, elsewhere, dt)
	if done {
		return tax
	}
	idx := map[string]int{}
	weighted := map[string]float64{}
	for _, p := range progs {
		rate := p.Delta.RunsPerSec
		if dt <= 0 {
			if age := now.Sub(p.LoadTime).Seconds(); age > 0 {
				rate = float64(p.RunCount) / age
			}
		}
		ns, src, ok := costFor(&p.Program, byKind)
		if !ok {
			continue
		}
		j, seen := idx[p.Type]
		if !seen {
			j = len(tax.ByProgramType)
			idx[p.Type] = j
			tax.ByProgramType = append(tax.ByProgramType, ProgramTypeTax{ProgramType: p.Type, Source: src})
		}
		t := &tax.ByProgramType[j]
		t.Programs++
		t.RunsPerSec += rate
		t.AlwaysCPUShare += rate * ns / 1e9
		weighted[p.Type] += rate * ns
		if t.Source != src {
			t.Source = "mixed"
		}
	}
	for i := range tax.ByProgramType {
		t := &tax.ByProgramType[i]
		if t.RunsPerSec > 0 {
			t.CostNs = weighted[t.ProgramType] / t.RunsPerSec
		}
		t.CPUShare = t.AlwaysCPUShare * tax.Duty
		tax.AlwaysCPUShare += t.AlwaysCPUShare
	}
	tax.CPUShare = tax.AlwaysCPUShare * tax.Duty
	sort.Slice(tax.ByProgramType, func(a, b int) bool {
		return tax.ByProgramType[a].ProgramType < tax.ByProgramType[b].ProgramType
	})
	return tax
}

// taxHead is the stats tax's duty and where its rates come from, or, with
// done, the whole answer when there is no figure to sum.
func taxHead(st StatsState, byKind map[string]float64, elsewhere bool, dt time.Duration) (tax StatsTax, done bool) {
	switch st.Mode {
	case config.StatsAlways:
		tax.Duty = 1
	case config.StatsSampled:
		if st.Period > 0 {
			tax.Duty = float64(st.Window) / float64(st.Period)
		}
	}
	if !st.HeldByAgent && st.Mode == config.StatsAlways {
		tax.Duty = 0 // stats refused: the agent pays nothing
	}
	switch {
	case st.Mode == config.StatsOff:
		tax.Known, tax.Reason = true, "stats off: no tax from bpfleet"
		if st.HeldElsewhere {
			tax.Reason = "stats off in bpfleet, but held elsewhere: that tax is another tool's"
		}
		return tax, true
	case st.HeldElsewhere || (len(byKind) == 0 && elsewhere):
		tax.Reason = "not measurable: stats held elsewhere"
		return tax, true
	case len(byKind) == 0:
		tax.Reason = "not measured yet: stats cost calibration pending or off (--calibrate)"
		return tax, true
	}
	tax.Known = true
	switch {
	case dt <= 0:
		tax.RatesSince = "load"
	case st.Mode == config.StatsSampled:
		tax.RatesSince = "windows"
	default:
		tax.RatesSince = "interval"
	}
	return tax, false
}

// ProcessCPU is the calling process's CPU time (user + system).
func ProcessCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
