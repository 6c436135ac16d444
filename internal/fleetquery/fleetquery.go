// Package fleetquery holds the PromQL of the fleet's questions — which
// programs cost the most, which miss and why, what each attach type costs
// per kernel and node pool, which agents are absent or blind — in one
// place: `bpfleet fleet` runs them against any Prometheus-compatible query
// API and exporter/dashboards puts the same strings in the fleet
// dashboard. It is a leaf (it imports nothing of ours) so that the
// dashboards need not import cmd, nor the CLI the exporter.
//
// The metric names are those the OTLP receiver gives exporter/METRICS.md's
// names (a test holds them to exporter.PrometheusName). Node facts
// (os_version, the node pool) are resource attributes, reached as the
// alert rules reach them: through target_info, joined on (job, instance),
// the newest per node.
package fleetquery

import (
	"fmt"
	"regexp"
	"strings"
)

// Metric names: Prometheus' names for exporter/METRICS.md's metrics (the
// OTel name in each comment).
const (
	RunTime        = "bpf_program_run_time_seconds_total" // bpf.program.run.time
	RunCount       = "bpf_program_run_count_total"        // bpf.program.run.count
	Misses         = "bpf_program_recursion_misses_total" // bpf.program.recursion_misses
	Overhead       = "bpf_attach_type_overhead_seconds"   // bpf.attach_type.overhead
	Scans          = "bpf_agent_scans_total"              // bpf.agent.scans
	Shutdown       = "bpf_agent_shutdown"                 // bpf.agent.shutdown
	StatsEnabled   = "bpf_agent_stats_enabled"            // bpf.agent.stats.enabled
	StatsMode      = "bpf_agent_stats_mode"               // bpf.agent.stats.mode
	WatchAvailable = "bpf_agent_misswatch_available"      // bpf.agent.misswatch.available
	ScanErrors     = "bpf_agent_scan_errors_total"        // bpf.agent.scan.errors
	Dropped        = "bpf_agent_programs_dropped"         // bpf.agent.programs.dropped
	TargetInfo     = "target_info"                        // the OTLP resource
)

// OTelNames maps each metric above to its name in exporter/METRICS.md.
var OTelNames = map[string]string{
	RunTime:        "bpf.program.run.time",
	RunCount:       "bpf.program.run.count",
	Misses:         "bpf.program.recursion_misses",
	Overhead:       "bpf.attach_type.overhead",
	Scans:          "bpf.agent.scans",
	Shutdown:       "bpf.agent.shutdown",
	StatsEnabled:   "bpf.agent.stats.enabled",
	StatsMode:      "bpf.agent.stats.mode",
	WatchAvailable: "bpf.agent.misswatch.available",
	ScanErrors:     "bpf.agent.scan.errors",
	Dropped:        "bpf.agent.programs.dropped",
}

// Labels the answers are keyed by.
const (
	Program    = "bpf_program_name"
	AttachType = "bpf_attach_type"
	Cause      = "bpf_miss_cause"
	Kernel     = "os_version"
	Instance   = "instance"
	Job        = "job"
	Namespace  = "k8s_namespace_name"
	WlKind     = "k8s_workload_kind"
	WlName     = "k8s_workload_name"
	Pod        = "k8s_pod_name"
	StatsModeL = "bpf_stats_mode"
)

// DefaultJob matches the agents' job: service.name bpfleet-agent, with or
// without a service.namespace in front (as the alert rules match it).
const DefaultJob = `(.+/)?bpfleet-agent`

// DefaultPoolLabel is the label naming a node's pool: the resource
// attribute k8s.nodepool.name, which each agent sets from its Node's pool
// label (--node-pool-labels) or OTEL_RESOURCE_ATTRIBUTES sets; there is
// no semantic convention for it. Prometheus keeps it in target_info unless promoted;
// VictoriaMetrics makes it a label of every series.
const DefaultPoolLabel = "k8s_nodepool_name"

// Params are what every question is asked over. The strings are PromQL
// as written: the CLI gives durations ("3600s"), the dashboard Grafana's
// variables.
type Params struct {
	// Sel is the label matchers every selector carries, e.g.
	// job=~"(.+/)?bpfleet-agent".
	Sel string
	// Range is how far back the questions look (increase, last seen);
	// RangeSeconds the same in seconds, a number ("$__range_s" in
	// Grafana).
	Range, RangeSeconds string
	// Window is the recent past the per-node states are judged over
	// (stalled, no stats, no watcher) and the sliding window "since when"
	// looks for a miss in: at least two exports of an agent (30 s apart
	// at most for a series that did not move).
	Window string
	// Step is the resolution of "since when" and "last seen".
	Step string
	// Pool is the target_info label naming the node pool.
	Pool string
	// MissIncrease is the function the miss counters' increase is taken
	// with: "" or IncreasePromQL, or IncreasePure on a store that speaks
	// MetricsQL (a cause's first misses on a node are a new series, and
	// MetricsQL's increase() may leave out a new series' first value).
	MissIncrease string
}

// The increase functions of the miss questions.
const (
	// IncreasePromQL is PromQL's increase(): Prometheus counts a new
	// series from the zero its created-timestamp ingestion writes at the
	// counter's start (exporter/starttime.go).
	IncreasePromQL = "increase"
	// IncreasePure is MetricsQL's increase_pure(): increase() but for a
	// series with no sample before the range, which it counts from 0
	// where increase() drops a first value large against the next change
	// (taking it for a counter that began before the store saw it).
	IncreasePure = "increase_pure"
)

// MetricsQLProbe is a query only a MetricsQL store answers (PromQL
// refuses the function as unknown: bad_data): asked once, it tells the
// CLI whether IncreasePure is there. It reads no series.
const MetricsQLProbe = IncreasePure + "(vector(0)[1m:1m])"

// missIncrease is the function the miss counters are read with.
func (p Params) missIncrease() string {
	if p.MissIncrease == "" {
		return IncreasePromQL
	}
	return p.MissIncrease
}

// JobSel is the matcher of an agents' job regex.
func JobSel(job string) string { return fmt.Sprintf("job=~%q", job) }

func (p Params) sel(m string) string { return m + "{" + p.Sel + "}" }

// key is what a program is across the fleet: its name and attach type,
// which survive reloads and agree between nodes (the workload level's
// name drops per-instance suffixes).
const key = Program + ", " + AttachType

// TopCPU is each program's run time per second across the fleet over the
// range, in CPUs: its run time in the range over the range's length, not
// rate(), which VictoriaMetrics divides by the span of the samples it
// found (a program seen for a minute of the hour would cost 60 times as
// much there).
func (p Params) TopCPU() string { return p.perSecond(RunTime, key) }

// TopRuns is each program's runs per second across the fleet, as TopCPU.
func (p Params) TopRuns() string { return p.perSecond(RunCount, key) }

// perSecond is counter m's increase over the range, summed by the labels
// by, over the range's length.
func (p Params) perSecond(m, by string) string {
	return fmt.Sprintf("sum by (%s) (increase(%s[%s])) / %s", by, p.sel(m), p.Range, p.RangeSeconds)
}

// TopCPUByNode is TopCPU per node (instance) too: bpfleet fleet top
// sums the nodes and finds the worst node (TopWorst) from it and
// TopRunsByNode in one round. Asking TopWorst after the first round's
// answers cost a second pass over the shown programs' series, after the
// first: at 1,000 nodes with an hour of history (360 samples a series)
// it took top over 1 s (docs/performance.md).
func (p Params) TopCPUByNode() string { return p.perSecond(RunTime, Instance+", "+key) }

// TopRunsByNode is TopRuns per node, as TopCPUByNode.
func (p Params) TopRunsByNode() string { return p.perSecond(RunCount, Instance+", "+key) }

// TopMisses is each program's misses in the range by cause.
func (p Params) TopMisses() string {
	return fmt.Sprintf("sum by (%s, %s) (%s(%s[%s]))", key, Cause, p.missIncrease(), p.sel(Misses), p.Range)
}

// TopNodes is how many nodes run each program now (a series of its runs
// or of its misses within the store's lookback: the latter is there with
// stats off). Now, not over the range: an instant selector reads one
// sample a series where the range would read them all.
func (p Params) TopNodes() string {
	return fmt.Sprintf("count by (%s) (group by (%s, %s) (%s) or group by (%s, %s) (%s))",
		key, Instance, key, p.sel(RunCount), Instance, key, p.sel(Misses))
}

// TopWorst is, per program, the node where one run cost the most (run
// time / runs over the range), in seconds per run: the fleet dashboard's
// panel (bpfleet fleet top finds it from TopCPUByNode and TopRunsByNode).
func (p Params) TopWorst() string {
	return fmt.Sprintf("topk by (%s) (1, sum by (%s, %s) (increase(%s[%s])) / sum by (%s, %s) (increase(%s[%s])) > 0)",
		key, Instance, key, p.sel(RunTime), p.Range, Instance, key, p.sel(RunCount), p.Range)
}

// missWhere is the owner the miss series carry: the workload (workload
// and program levels) and the pod (program level only).
const missWhere = Namespace + ", " + WlKind + ", " + WlName + ", " + Pod

// MissesByNode is every program that missed in the range, per node,
// cause and owner.
func (p Params) MissesByNode() string {
	return fmt.Sprintf("sum by (%s, %s, %s, %s) (%s(%s[%s])) > 0", Instance, key, Cause, missWhere, p.missIncrease(), p.sel(Misses), p.Range)
}

// MissesSince is, per node, program and cause, the first time in the
// range a Window ending then held a miss: when it began missing, to a
// Step. programs (those MissesByNode found; none: all) narrow it: the
// subquery evaluates the window at every step, and every program has a
// miss series (its unexplained one) whether it missed or not.
func (p Params) MissesSince(programs ...string) string {
	sel := p.sel(Misses)
	if len(programs) > 0 {
		sel = fmt.Sprintf("%s{%s, %s}", Misses, p.Sel, oneOf(Program, programs))
	}
	return fmt.Sprintf("min_over_time(timestamp(sum by (%s, %s, %s) (%s(%s[%s])) > 0)[%s:%s])",
		Instance, key, Cause, p.missIncrease(), sel, p.Window, p.Range, p.Step)
}

// nodeInfo is 1 per node with its kernel and pool from the newest
// target_info the node sent (after a kernel upgrade the old one still has
// samples: joining both would be a many-to-one error), or, for a node
// without target_info (a store that makes resource attributes labels of
// every series instead, as VictoriaMetrics does), from its agent's own
// series. A node silent for over the store's lookback (5 m) gets one of
// the sets it sent in the range (any: ordering them would take a subquery
// over every node's series, the dearest part of the question). instances
// (none: all) narrow it to those nodes.
func (p Params) nodeInfo(instances ...string) string {
	by := fmt.Sprintf("%s, %s, %s, %s", Job, Instance, Kernel, p.Pool)
	sel := p.Sel
	if len(instances) > 0 {
		sel += ", " + oneOf(Instance, instances)
	}
	now := func(m string) string { return fmt.Sprintf("max by (%s) (timestamp(%s{%s}))", by, m, sel) }
	inRange := func(m string) string {
		return fmt.Sprintf("max by (%s) (last_over_time(%s{%s}[%s]))", by, m, sel, p.Range)
	}
	on := fmt.Sprintf(" or on (%s, %s) ", Job, Instance)
	return fmt.Sprintf("topk by (%s, %s) (1, %s) * 0 + 1", Job, Instance,
		strings.Join([]string{now(TargetInfo), now(Scans), inRange(TargetInfo), inRange(Scans)}, on))
}

// oneOf is a matcher of label to any of vs, as they are.
func oneOf(label string, vs []string) string {
	re := make([]string, len(vs))
	for i, v := range vs {
		re[i] = regexp.QuoteMeta(v)
	}
	return fmt.Sprintf("%s=~%q", label, strings.Join(re, "|"))
}

// NodeInfo is the node's kernel and pool (the labels of its newest
// target_info), 1 per node, of the instances given (none: every node).
func (p Params) NodeInfo(instances ...string) string { return p.nodeInfo(instances...) }

// OverheadByNode is each node's calibrated overhead per attach type (the
// newest in the range), with its kernel and pool as labels.
func (p Params) OverheadByNode() string {
	return fmt.Sprintf("max by (%s, %s, %s) (last_over_time(%s[%s])) * on (%s, %s) group_left (%s, %s) (%s)",
		Job, Instance, AttachType, p.sel(Overhead), p.Range, Job, Instance, Kernel, p.Pool, p.nodeInfo())
}

// OverheadMedian is the fleet's median overhead per attach type, kernel
// and pool (the dashboard's; the CLI computes it, with min and max, from
// OverheadByNode's rows).
func (p Params) OverheadMedian() string {
	return fmt.Sprintf("quantile by (%s, %s, %s) (0.5, %s)", AttachType, Kernel, p.Pool, p.OverheadByNode())
}

// LastSeen is the time of each agent's newest sample: within the store's
// lookback (5 m) exactly, before it in the range at the Step's resolution.
func (p Params) LastSeen() string {
	return fmt.Sprintf("max by (%s, %s) (timestamp(%s)) or on (%s, %s) max by (%s, %s) (max_over_time(timestamp(%s)[%s:%s]))",
		Job, Instance, p.sel(Scans), Job, Instance, Job, Instance, p.sel(Scans), p.Range, p.Step)
}

// ScansGrowth is the scans each agent completed in the Window.
func (p Params) ScansGrowth() string {
	return fmt.Sprintf("sum by (%s, %s) (increase(%s[%s]))", Job, Instance, p.sel(Scans), p.Window)
}

// ShutdownLast is 1 for an agent whose latest export in the range was its
// final one (SIGTERM: it left on purpose).
func (p Params) ShutdownLast() string {
	return fmt.Sprintf("max by (%s, %s) (last_over_time(%s[%s]))", Job, Instance, p.sel(Shutdown), p.Range)
}

// StatsOff is 0 for an agent whose BPF stats were off in the Window
// against its --stats mode (the BPFStatsDisabled rule's terms); --stats=off
// by choice is left out.
func (p Params) StatsOff() string {
	return fmt.Sprintf("min by (%s, %s) (last_over_time(%s[%s])) == 0 unless on (%s, %s) (max by (%s, %s) (last_over_time(%s[%s])) == 1)",
		Job, Instance, p.sel(StatsEnabled), p.Window, Job, Instance, Job, Instance, p.statsModeOff(), p.Window)
}

func (p Params) statsModeOff() string {
	return fmt.Sprintf("%s{%s, %s=\"off\"}", StatsMode, p.Sel, StatsModeL)
}

// WatcherOff is 0 for an agent without the miss watcher in the Window.
func (p Params) WatcherOff() string {
	return fmt.Sprintf("min by (%s, %s) (last_over_time(%s[%s])) == 0", Job, Instance, p.sel(WatchAvailable), p.Window)
}

// ScanErrorsGrowth is objects an agent could not read, or failed scans, in
// the Window, where there were any.
func (p Params) ScanErrorsGrowth() string {
	return fmt.Sprintf("sum by (%s, %s) (increase(%s[%s])) > 0", Job, Instance, p.sel(ScanErrors), p.Window)
}

// DroppedNow is the programs an agent left out of its export
// (--max-programs, the cardinality limit), where there were any.
func (p Params) DroppedNow() string {
	return fmt.Sprintf("max by (%s, %s) (last_over_time(%s[%s])) > 0", Job, Instance, p.sel(Dropped), p.Window)
}

// Present is how many agents sent anything in the range: 0 (no result) is
// a backend without bpfleet's series.
func (p Params) Present() string {
	return fmt.Sprintf("count(group by (%s, %s) (last_over_time(%s[%s])))", Job, Instance, p.sel(Scans), p.Range)
}

// Queries is every question by name, for a test or a benchmark to run
// them all.
func (p Params) Queries() map[string]string {
	return map[string]string{
		"top cpu": p.TopCPU(), "top runs": p.TopRuns(), "top misses": p.TopMisses(), "top nodes": p.TopNodes(), "top worst": p.TopWorst(),
		"top cpu by node": p.TopCPUByNode(), "top runs by node": p.TopRunsByNode(),
		"misses by node": p.MissesByNode(), "misses since": p.MissesSince(), "node info": p.NodeInfo(),
		"overhead by node": p.OverheadByNode(), "overhead median": p.OverheadMedian(),
		"last seen": p.LastSeen(), "scans growth": p.ScansGrowth(), "shutdown": p.ShutdownLast(),
		"stats off": p.StatsOff(), "watcher off": p.WatcherOff(), "scan errors": p.ScanErrorsGrowth(), "dropped": p.DroppedNow(),
		"present": p.Present(),
	}
}

// Compact is q on one line, as a table or log shows it.
func Compact(q string) string { return strings.Join(strings.Fields(q), " ") }
