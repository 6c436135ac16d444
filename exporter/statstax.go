package exporter

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

// Attribute sets of the stats rows.
var (
	statsModeAttrs   = []string{"bpf.stats.mode"}
	programTypeAttrs = []string{"bpf.program.type"}
	statsKindAttrs   = []string{"bpf.stats.kind"}
	identityAttrs    = []string{"bpf.program.id", "bpf.program.name", "bpf.program.tag", "bpf.program.type", "bpf.attach.type", "bpf.attach.target", "bpf.program.sleepable"}
)

// statsView is what the stats-mode and stats-tax metrics read.
type statsView struct {
	mode     agent.StatsMode
	counts   string // agent.StatsState.Counts
	agentCPU float64
	tax      agent.StatsTax
	costs    []agent.StatsCost
}

func newStatsView(s *agent.Snapshot) statsView {
	return statsView{mode: s.Stats.Mode, counts: s.Stats.Counts, agentCPU: s.AgentCPUShare, tax: s.StatsTax, costs: s.StatsCosts}
}

// runMetrics are the series that exist only while stats count runs.
var runMetrics = []string{
	"bpf.program.run.count", "bpf.program.run.time",
	"bpf.owner.run.count", "bpf.owner.run.time",
	"bpf.attach_type.run.count", "bpf.attach_type.run.time",
}

// runObserver leaves run metrics out with --stats=off: absent, not zero,
// the kernel did not count. Whether an interval's counts are exact or
// scaled from windows is bpf.agent.stats.exact, not an attribute of the
// run series: a series whose attributes flipped with other holders of
// stats coming and going would split in two (at the workload level both
// halves carrying the key's whole count).
func runObserver(obs func(*view, sink)) func(*view, sink) {
	return func(v *view, s sink) {
		if v.stats.mode != agent.StatsOff {
			obs(v, s)
		}
	}
}

func init() {
	for _, n := range runMetrics {
		if obs := observers[n]; obs != nil { // the program metrics: series.go
			observers[n] = runObserver(obs)
		}
	}
	observers["bpf.agent.cpu"] = func(v *view, s sink) { s.Float(v.stats.agentCPU, empty) }
	observers["bpf.agent.stats.mode"] = func(v *view, s sink) {
		if v.stats.mode != "" {
			s.Int(1, attribute.NewSet(attribute.String("bpf.stats.mode", string(v.stats.mode))))
		}
	}
	observers["bpf.agent.stats.exact"] = func(v *view, s sink) {
		if v.stats.mode != "" && v.stats.mode != agent.StatsOff {
			s.Int(b2i(v.stats.counts == agent.CountsExact), empty)
		}
	}
	observers["bpf.agent.stats.tax"] = func(v *view, s sink) {
		if v.stats.tax.Known {
			s.Float(v.stats.tax.CPUShare, empty)
		}
	}
	observers["bpf.agent.stats.tax.always"] = func(v *view, s sink) {
		if v.stats.tax.Known && v.stats.tax.Duty > 0 {
			s.Float(v.stats.tax.AlwaysCPUShare, empty)
		}
	}
	observers["bpf.program_type.stats.tax"] = func(v *view, s sink) {
		for _, t := range v.stats.tax.ByProgramType {
			s.Float(t.CPUShare, attribute.NewSet(attribute.String("bpf.program.type", t.ProgramType)))
		}
	}
	observers["bpf.agent.stats.cost"] = func(v *view, s sink) {
		for _, c := range v.stats.costs {
			if c.Measured {
				s.Float(c.TaxNs/1e9, attribute.NewSet(attribute.String("bpf.stats.kind", c.Kind)))
			}
		}
	}
}

// statsTaxDoc explains in METRICS.md how the stats tax and sampled counts
// are computed and how far to trust them.
const statsTaxDoc = `## The stats tax and the stats modes

While any ` + "`BPF_ENABLE_STATS`" + ` fd is held (or ` + "`kernel.bpf_stats_enabled=1`" + `), every run of
every BPF program on the node reads the clock twice and updates per-CPU counters. bpfleet
measures what that costs per run at start (` + "`--calibrate`" + `): stats off and on alternated in
the same run (ABBA rounds, median of 3), for a no-op XDP and tc program through
` + "`BPF_PROG_TEST_RUN`" + ` (100,000 runs per half round; the kernel times the loop) and for
each attach type the calibration probes work for (its counting probe fired by its trigger).
The results are ` + "`bpf.agent.stats.cost`" + `. While measuring, the agent holds no stats fd; if
a test program's run count still grows, or the sysctl is 1, another holder keeps stats on and
the cost is "not measurable: stats held elsewhere" (no number, and no tax metric).

` + "`bpf.agent.stats.tax`" + ` = Σ over programs of runs/s × the cost per run of the program's
kind × the agent's duty (1 ` + "`always`" + `, window/period ` + "`sampled`" + `, 0 ` + "`off`" + `). A program's
kind is its attach type where that was measured; else xdp for XDP, tc for skb programs
(sched_cls, sched_act, socket_filter, cgroup_*, sk_*, lwt_*), raw_tp for other tracing types
(the same ` + "`bpf_prog_run`" + ` / trampoline stats path), xdp for anything else.
Error: the cost's spread over the rounds (` + "`bpfleet bench --tax`" + ` prints it; a few ns on
a quiet machine, more on a busy VM), the nearest-kind substitution where a kind was not
measured, and the runs/s error below. The per-run figure is for this node's clock source: a
VM's clock read is dearer than bare metal's.

` + "`--stats`" + `: ` + "`always`" + ` holds the fd for the agent's life (exact counts, full tax).
` + "`sampled`" + ` holds it for ` + "`--stats-window`" + ` of every ` + "`--stats-period`" + ` (default 1 s of
10 s): each program's rate is the runs (and run time) counted over at least half a window of
counted time divided by that time, and each interval gets rate × its length, never less than
the kernel counted in it. Counted time is the agent's windows plus any time another holder kept
stats on (a local ` + "`bpfleet top`" + `, ` + "`bpftool prog profile`" + `, ` + "`kernel.bpf_stats_enabled=1`" + `):
right before and after each window, every second between windows and at every scan the agent
test-runs a no-op program without its fd to see. An interval another holder spans gets the
kernel's exact count on top of the estimate so far (` + "`bpf.agent.stats.exact`" + ` is 1 then, 0 for
estimated intervals); an interval in which one came or went is no measurement and gets the last
rate. So the counters never go down, nor jump by period/window, as holders come and go, and the
run series keep their attributes (a label that said exact or sampled would split each series in
two at every change). A program loaded since the previous scan is counted from its load; until
its first rate is measured it gets the kernel's count, and the first rate adds the estimate of
the time before. Misses are exact in every mode (the kernel counts them with stats off). For a
program running at a steady rate the estimate is within 5% (the host tests
` + "`TestSampledRunCountKnownRate`" + `, ` + "`TestSampledHolderComesAndGoes`" + ` and ` + "`TestSampledLoadMidWindow`" + `
hold it to that, 10% for a program's first scan); a bursty program's error is larger: a burst
wholly between windows is missed, one inside a window is multiplied by period/window. A holder
that comes and goes within a second between two looks is not seen: its runs count in the next
rate as if the agent had counted them. ` + "`off`" + ` never enables stats: run counts and run times
are absent (not zero); misses, attach types, owners and the profiler remain, and the alert
` + "`BPFStatsDisabled`" + ` stays quiet (it fires only where stats are off against the mode).

`
