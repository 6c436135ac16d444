// Package dashboards builds bpfleet's Grafana dashboards as code (with the
// Grafana Foundation SDK). Every metric name comes from the exporter's
// metrics table through exporter.PrometheusName, so a renamed metric fails
// the generator instead of leaving a panel empty. The JSON is committed in
// charts/bpfleet/dashboards (go generate ./exporter/dashboards) and
// shipped by the chart; exporter/e2e runs every panel's query against a
// Prometheus the agent fed.
//
// The queries hold for both ways of collecting: over OTLP, Prometheus sets
// job from service.name and instance from service.instance.id (the node's
// name); scraped, the chart's ServiceMonitor sets instance to the node's
// name.
package dashboards

// The classic (v1) dashboard JSON on purpose: it is what Grafana's sidecar
// loads from ConfigMaps on every Grafana version fleets run; the v2 schema
// the SDK prefers needs Grafana 12's new dashboard API.
//lint:file-ignore SA1019 v1 dashboards are the format the sidecar provisions

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/fleetquery"
)

// The chart's dashboards are this package's Files; exporter/internal/gendocs
// writes them, TestGenerated holds the committed files to them.
//go:generate go run ../internal/gendocs -dashboards ../../charts/bpfleet/dashboards

// Template variables the queries use; exporter/e2e substitutes them.
const (
	VarDatasource = "datasource"
	VarJob        = "job"
	VarNode       = "node"
)

// Files returns the dashboards as the chart ships them: file name → JSON.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for name, build := range map[string]func(*names) *dashboard.DashboardBuilder{
		"bpfleet-fleet.json": fleet,
		"bpfleet-node.json":  node,
	} {
		n := &names{}
		b := build(n)
		if n.err != nil {
			return nil, fmt.Errorf("%s: %w", name, n.err)
		}
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", name, err)
		}
		// Unique panel ids, in layout order (Grafana keys links and
		// per-panel state by them).
		for i, p := range d.Panels {
			id := uint32(i + 1)
			switch {
			case p.Panel != nil:
				p.Panel.Id = &id
			case p.RowPanel != nil:
				p.RowPanel.Id = id
			}
		}
		j, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", name, err)
		}
		out[name] = append(j, '\n')
	}
	return out, nil
}

// Write writes Files into dir (charts/bpfleet/dashboards), making it if
// need be.
func Write(dir string) error {
	files, err := Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// names looks metrics up in the exporter's table, keeping the first miss.
type names struct{ err error }

func (n *names) m(otelName string) string {
	p, err := exporter.PrometheusName(otelName)
	if err != nil && n.err == nil {
		n.err = err
	}
	return p
}

var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + VarDatasource + "}")}

// sel is the label selector every fleet query carries.
const fleetSel = `job=~"$job", instance=~"$node"`

// nodeSel selects the one node of the node view.
const nodeSel = `job=~"$job", instance="$node"`

func variables(b *dashboard.DashboardBuilder, n *names, multiNode bool) *dashboard.DashboardBuilder {
	scans := n.m("bpf.agent.scans")
	return b.
		WithVariable(dashboard.NewDatasourceVariableBuilder(VarDatasource).Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder(VarJob).Label("Job").
			Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr(fmt.Sprintf("label_values(%s, job)", scans))}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).IncludeAll(true).AllValue(".*")).
		WithVariable(dashboard.NewQueryVariableBuilder(VarNode).Label("Node").
			Description("The instance label: the node's name (service.instance.id over OTLP, set by the ServiceMonitor when scraped).").
			Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr(fmt.Sprintf(`label_values(%s{job=~"$job"}, instance)`, scans))}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(multiNode).IncludeAll(multiNode).AllValue(".*"))
}

func base(title, uid, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"bpfleet", "ebpf"}).
		Refresh("1m").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Editable()
}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(expr).LegendFormat(legend)
}

// series is a time series panel. Its min interval is a minute: the agent
// pushes a series that did not move every 30 s (--resend-unchanged), so a
// rate over $__rate_interval (at least the min interval plus the
// datasource's scrape interval) always holds two points of an idle
// program's series, whatever scrape interval the datasource says.
func series(title, description, unit string, w uint32, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).Description(description).Datasource(ds).
		Unit(unit).Min(0).Height(8).Span(w).Interval("1m").
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementRight).ShowLegend(true).Calcs([]string{"max", "lastNotNull"}))
	for i, t := range targets {
		p = p.WithTarget(t.RefId(string(rune('A' + i))))
	}
	return p
}

func single(title, description, unit string, w uint32, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).Description(description).Datasource(ds).
		Unit(unit).Height(4).Span(w).
		WithTarget(q.RefId("A").Instant()).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

// rate is rate(metric{sel}[$__rate_interval]).
func rate(metric, sel string) string {
	return fmt.Sprintf("rate(%s{%s}[$__rate_interval])", metric, sel)
}

// ownerRunTime is the run time by workload: the owner metrics at
// --metrics-level=owner, the program metrics (which carry the same owner
// attributes) at program level.
func ownerRunTime(n *names, sel, by string) string {
	return fmt.Sprintf("sum by (%s) (%s)\nor\nsum by (%s) (%s)",
		by, rate(n.m("bpf.owner.run.time"), sel), by, rate(n.m("bpf.program.run.time"), sel))
}

// workload groups by the owner: the controller (k8s.workload.*) where the
// agent names it, else the pod, container or executable. Labels a level
// does not export group as empty.
const workload = "k8s_namespace_name, k8s_workload_kind, k8s_workload_name, k8s_pod_name, container_id, process_executable_name"
const workloadLegend = "{{k8s_namespace_name}} {{k8s_workload_kind}}/{{k8s_workload_name}} {{k8s_pod_name}} {{process_executable_name}}"

// mapWorkload is what a map series (and a workload key's memory) says of
// its owner: the workload and executable, never the pod (METRICS.md, "Maps
// and memory").
const mapWorkload = "k8s_namespace_name, k8s_workload_kind, k8s_workload_name, process_executable_name"
const mapWorkloadLegend = "{{k8s_namespace_name}} {{k8s_workload_kind}}/{{k8s_workload_name}} {{process_executable_name}}"

// memoryByWorkload is the node's BPF memory by workload: the maps of each
// workload (the map series of one workload hold each of its maps once) and
// its programs' own memory, and the node's total, each map once.
func memoryByWorkload(n *names, sel string) []*prometheus.DataqueryBuilder {
	return []*prometheus.DataqueryBuilder{
		query(fmt.Sprintf("sum by (%s) (%s{%s})", mapWorkload, n.m("bpf.map.memory"), sel), "maps of "+mapWorkloadLegend),
		query(fmt.Sprintf(`sum by (%s) (%s{%s, bpf_memory_kind="program"})`, mapWorkload, n.m("bpf.program.memory"), sel), "programs of "+mapWorkloadLegend),
		query(fmt.Sprintf("sum by (instance) (%s{%s})", n.m("bpf.node.memory"), sel), "{{instance}} total"),
	}
}

// fullestMaps is the k fullest maps (entries / max entries, the hash
// family) by name, type and workload, across reloads.
func fullestMaps(n *names, sel, by string, k int) string {
	return fmt.Sprintf("topk(%d, max by (%s, bpf_map_name, bpf_map_type, %s) (%s{%s}))", k, by, mapWorkload, n.m("bpf.map.fullness"), sel)
}

const fullestLegend = "{{bpf_map_name}} ({{bpf_map_type}}) " + mapWorkloadLegend

// evictingMaps is the k LRU map keys that evict the most entries per
// second, by the labels in by and each map's name, type and workload.
func evictingMaps(n *names, sel, by string, k int) string {
	return fmt.Sprintf("topk(%d, sum by (%s, bpf_map_name, bpf_map_type, %s) (%s))", k, by, mapWorkload, rate(n.m("bpf.map.evictions"), sel))
}

// evictingDesc says what the evictions panel shows.
const evictingDesc = "Entries per second the LRU hash maps evict (the agent's probe: the kernel keeps no count), the 10 highest, by map name, type and workload. An LRU frees in batches and evicts before it looks full, so a map evicting steadily is undersized even at 60% fullness (BPFMapEvicting). Absent where the kernel refuses the probe."

// causePanelDesc says what the miss causes mean (METRICS.md, "Why a
// program missed").
const causePanelDesc = "Recursion misses per second by bpf.miss.cause, as the miss watcher measured them from the kernel stack of each run turned away: recursion (the program re-entered itself: fix it), interrupt (an irq/softirq/NMI hit it), preempted (another task held its guard, preempted or asleep: contention), nested (another program held bpf_prog_active), unexplained (not sampled: not watched, no watcher, over budget)."

// answer is a table of one instant query's answer, as `bpfleet fleet`
// reads it.
func answer(title, description, unit string, w uint32, q string) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title(title).Description(description).Datasource(ds).
		Unit(unit).Height(8).Span(w).
		WithTarget(query(q, "").RefId("A").Instant().Format(prometheus.PromQueryFormatTable))
}

// fleetQuestions are `bpfleet fleet`'s queries (internal/fleetquery: the
// same strings) over the dashboard's time range and nodes.
var fleetQuestions = fleetquery.Params{Sel: fleetSel, Range: "$__range", RangeSeconds: "$__range_s", Window: "5m", Step: "1m", Pool: fleetquery.DefaultPoolLabel}

func fleet(n *names) *dashboard.DashboardBuilder {
	b := base("bpfleet / Fleet", "bpfleet-fleet",
		"BPF programs across the fleet: recursion misses, cost by attach type and workload, agent health. Metrics: exporter/METRICS.md.")
	b = variables(b, n, true)
	misses := n.m("bpf.program.recursion_misses")
	atMisses := n.m("bpf.attach_type.recursion_misses")
	atRunTime := n.m("bpf.attach_type.run.time")
	atRunCount := n.m("bpf.attach_type.run.count")
	scans := n.m("bpf.agent.scans")

	b = b.WithRow(dashboard.NewRowBuilder("Recursion misses")).
		WithPanel(single("Nodes with misses", "Nodes where any program's recursion misses grew in the time range.", "none", 6,
			query(fmt.Sprintf("count(sum by (instance) (increase(%s{%s}[$__range])) > 0)", atMisses, fleetSel), "")).NoValue("0")).
		WithPanel(single("Misses in range", "Runs the kernel skipped because a program's recursion guard was held, all selected nodes.", "short", 6,
			query(fmt.Sprintf("sum(increase(%s{%s}[$__range]))", atMisses, fleetSel), ""))).
		WithPanel(single("Programs missing", "Programs whose recursion misses grew in the time range (--metrics-level=program).", "none", 6,
			query(fmt.Sprintf("count(sum without (bpf_miss_cause) (increase(%s{%s}[$__range])) > 0)", misses, fleetSel), "")).NoValue("0")).
		WithPanel(single("Agents scanning", "Agents whose scan counter grew recently; fewer than nodes means agents down or stuck.", "none", 6,
			query(fmt.Sprintf("count(%s > 0)", rate(scans, fleetSel)), ""))).
		WithPanel(series("Misses by kind and program", "Recursion misses per second by bpf.miss.kind and program name, summed across nodes. contention-possible: another task on the CPU may have held the guard (sleepable, PREEMPT_RT or fully preemptible kernels).", "short", 12,
			query(fmt.Sprintf("sum by (bpf_miss_kind, bpf_program_name) (%s)", rate(misses, fleetSel)), "{{bpf_miss_kind}} {{bpf_program_name}}"))).
		WithPanel(series("Misses by attach type and node", "Recursion misses per second by attach type, per node (all metrics levels).", "short", 12,
			query(fmt.Sprintf("sum by (bpf_attach_type, instance) (%s)", rate(atMisses, fleetSel)), "{{instance}} {{bpf_attach_type}}"))).
		WithPanel(series("Misses by cause", causePanelDesc, "short", 24,
			query(fmt.Sprintf("sum by (bpf_miss_cause) (%s)", rate(atMisses, fleetSel)), "{{bpf_miss_cause}}")))

	q := fleetQuestions
	b = b.WithRow(dashboard.NewRowBuilder("The fleet's questions (bpfleet fleet)")).
		WithPanel(answer("Programs by CPU (fleet top)", "Each program's run time across the selected nodes over the time range, in CPUs, by name and attach type: bpfleet fleet top's query.", "percentunit", 12, q.TopCPU())).
		WithPanel(answer("Worst node per program (fleet top)", "The node where one run of each program cost the most over the time range (run time / runs), in seconds per run: the worst node bpfleet fleet top finds from its per-node answers.", "s", 12, q.TopWorst())).
		WithPanel(answer("Misses by node and cause (fleet misses)", "Recursion misses in the time range by node, program, cause and owner (pods at --metrics-level=program, workloads at workload): bpfleet fleet misses' query.", "short", 24, q.MissesByNode())).
		WithPanel(answer("Attach-type overhead by kernel and pool (fleet overhead)", "The median over nodes of each attach type's calibrated overhead per triggered call, by kernel release (os.version) and node pool (the k8s.nodepool.name resource attribute): bpfleet fleet overhead's figures.", "s", 12, q.OverheadMedian())).
		WithPanel(answer("Agents' last export (fleet nodes)", "When each agent last exported in the time range: bpfleet fleet nodes calls one silent for over 5 minutes absent.", "dateTimeAsIso", 12, "("+q.LastSeen()+") * 1000"))

	b = b.WithRow(dashboard.NewRowBuilder("Cost")).
		WithPanel(series("CPU time by attach type", "Time BPF programs ran, in CPUs (CPU-seconds per second), by attach type, summed across nodes. Accrues only while BPF stats are enabled.", "percentunit", 12,
			query(fmt.Sprintf("sum by (bpf_attach_type) (%s)", rate(atRunTime, fleetSel)), "{{bpf_attach_type}}"))).
		WithPanel(series("CPU time by workload", "Time the programs each workload (pod, container or process) holds ran, in CPUs, summed across nodes.", "percentunit", 12,
			query(ownerRunTime(n, fleetSel, workload), workloadLegend))).
		WithPanel(series("Average run time per call by attach type", "Run time / runs: the cost of one program run, by attach type.", "s", 12,
			query(fmt.Sprintf("sum by (bpf_attach_type) (%s)\n/\nsum by (bpf_attach_type) (%s)", rate(atRunTime, fleetSel), rate(atRunCount, fleetSel)), "{{bpf_attach_type}}"))).
		WithPanel(series("CPU time by node", "Time all BPF programs ran on each node, in CPUs.", "percentunit", 12,
			query(fmt.Sprintf("sum by (instance) (%s)", rate(atRunTime, fleetSel)), "{{instance}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Memory and maps")).
		WithPanel(series("BPF memory by node", "Kernel memory of every BPF program and map on each node, each map once (in no process's RSS).", "bytes", 12,
			query(fmt.Sprintf("sum by (instance, bpf_memory_kind) (%s{%s})", n.m("bpf.node.memory"), fleetSel), "{{instance}} {{bpf_memory_kind}}"))).
		WithPanel(series("Fullest maps", "The 10 fullest hash-family maps of the selected nodes (entries / max entries), by node, map name and type, workload; hash, percpu_hash and hash_of_maps refuse new keys when full (BPFMapNearlyFull), LRU maps evict.", "percentunit", 12,
			query(fullestMaps(n, fleetSel, "instance", 10), "{{instance}} "+fullestLegend))).
		WithPanel(series("Evicting maps", evictingDesc, "short", 12,
			query(evictingMaps(n, fleetSel, "instance", 10), "{{instance}} "+fullestLegend)))

	b = b.WithRow(dashboard.NewRowBuilder("Stats tax and the agent's cost")).
		WithPanel(series("Stats tax by node", "CPU seconds per second (in CPUs) that BPF run-time stats accounting adds on each node now, and what it would add with stats always on. Absent where it cannot be measured (stats held by another tool, calibration off).", "percentunit", 8,
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.stats.tax"), fleetSel), "{{instance}}"),
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.stats.tax.always"), fleetSel), "{{instance}} if always on"))).
		WithPanel(series("Stats tax by program type", "The stats tax of the programs of each type, summed across nodes.", "percentunit", 8,
			query(fmt.Sprintf("sum by (bpf_program_type) (%s{%s})", n.m("bpf.program_type.stats.tax"), fleetSel), "{{bpf_program_type}}"))).
		WithPanel(series("Agent CPU", "Fraction of one CPU each agent used over its last scan interval, and its --stats mode.", "percentunit", 8,
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.cpu"), fleetSel), "{{instance}}"),
			query(fmt.Sprintf("max by (instance, bpf_stats_mode) (%s{%s})", n.m("bpf.agent.stats.mode"), fleetSel), "{{instance}} stats {{bpf_stats_mode}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Agent health")).
		WithPanel(series("Scan duration (p99)", "Time one scan of the kernel's programs, links and owners took, 99th percentile per node.", "s", 8,
			query(fmt.Sprintf("histogram_quantile(0.99, sum by (le, instance) (rate(%s_bucket{%s}[$__rate_interval])))", n.m("bpf.agent.scan.duration"), fleetSel), "{{instance}}"))).
		WithPanel(series("BPF stats enabled", "1 while the kernel accrues run counts and run time on the node. 0: run time and runs stop growing.", "none", 8,
			query(fmt.Sprintf("min by (instance) (%s{%s})", n.m("bpf.agent.stats.enabled"), fleetSel), "{{instance}}"))).
		WithPanel(series("Errors", "Failed exports (by signal), unreadable objects or failed scans, and programs left out by --max-programs.", "short", 8,
			query(fmt.Sprintf("sum by (instance, signal) (%s)", rate(n.m("bpf.agent.export.errors"), fleetSel)), "{{instance}} export {{signal}}"),
			query(fmt.Sprintf("sum by (instance) (%s)", rate(n.m("bpf.agent.scan.errors"), fleetSel)), "{{instance}} scan"),
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.programs.dropped"), fleetSel), "{{instance}} dropped programs"))).
		WithPanel(series("Programs and links per node", "Programs and links the latest scan saw.", "none", 24,
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.programs"), fleetSel), "{{instance}} programs"),
			query(fmt.Sprintf("max by (instance) (%s{%s})", n.m("bpf.agent.links"), fleetSel), "{{instance}} links")))
	return b
}

func node(n *names) *dashboard.DashboardBuilder {
	b := base("bpfleet / Node", "bpfleet-node",
		"One node's BPF programs: which run, what they cost, which miss, and the agent watching them. Metrics: exporter/METRICS.md.")
	b = variables(b, n, false)
	misses := n.m("bpf.program.recursion_misses")
	runTime := n.m("bpf.program.run.time")
	runCount := n.m("bpf.program.run.count")
	progLegend := "{{bpf_program_name}} #{{bpf_program_id}} {{bpf_attach_type}}"

	b = b.WithRow(dashboard.NewRowBuilder("Programs")).
		WithPanel(single("Programs", "Programs loaded on the node at the latest scan.", "none", 6,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.programs"), nodeSel), ""))).
		WithPanel(single("Links", "Links on the node at the latest scan.", "none", 6,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.links"), nodeSel), ""))).
		WithPanel(single("Misses in range", "Recursion misses of all programs on the node in the time range.", "short", 6,
			query(fmt.Sprintf("sum(increase(%s{%s}[$__range]))", n.m("bpf.attach_type.recursion_misses"), nodeSel), ""))).
		WithPanel(single("BPF stats", "1: the kernel accrues run time and runs (BPF_ENABLE_STATS held or kernel.bpf_stats_enabled).", "none", 6,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.stats.enabled"), nodeSel), ""))).
		WithPanel(series("Programs by attach type", "Programs of each attach type loaded now.", "none", 12,
			query(fmt.Sprintf("sum by (bpf_attach_type) (%s{%s})", n.m("bpf.attach_type.programs"), nodeSel), "{{bpf_attach_type}}"))).
		WithPanel(series("Top programs by CPU time", "The 10 programs that ran longest, in CPUs (--metrics-level=program).", "percentunit", 12,
			query(fmt.Sprintf("topk(10, %s)", rate(runTime, nodeSel)), progLegend)))

	b = b.WithRow(dashboard.NewRowBuilder("Misses and cost")).
		WithPanel(series("Recursion misses by program", "Runs skipped per second because the program's recursion guard was held, by program and bpf.miss.kind.", "short", 12,
			query(fmt.Sprintf("sum by (bpf_program_name, bpf_program_id, bpf_miss_kind) (%s)", rate(misses, nodeSel)), "{{bpf_miss_kind}} {{bpf_program_name}} #{{bpf_program_id}}"))).
		WithPanel(series("Misses by cause and program", causePanelDesc, "short", 24,
			query(fmt.Sprintf("sum by (bpf_miss_cause, bpf_program_name, bpf_program_id) (%s)", rate(misses, nodeSel)), "{{bpf_miss_cause}} {{bpf_program_name}} #{{bpf_program_id}}"))).
		WithPanel(series("kprobe link misses by attach type", "Events kprobe / kprobe.multi links missed per second (Linux 6.7+).", "short", 12,
			query(fmt.Sprintf("sum by (bpf_attach_type) (%s)", rate(n.m("bpf.attach_type.link.missed"), nodeSel)), "{{bpf_attach_type}}"))).
		WithPanel(series("Average run time per call by program", "Run time / runs of the 10 costliest programs per call.", "s", 12,
			query(fmt.Sprintf("topk(10, sum by (bpf_program_name, bpf_program_id, bpf_attach_type) (%s)\n/\nsum by (bpf_program_name, bpf_program_id, bpf_attach_type) (%s))", rate(runTime, nodeSel), rate(runCount, nodeSel)), progLegend))).
		WithPanel(series("CPU time by workload", "Time the programs each workload holds ran, in CPUs.", "percentunit", 12,
			query(ownerRunTime(n, nodeSel, workload), workloadLegend)))

	b = b.WithRow(dashboard.NewRowBuilder("Memory and maps")).
		WithPanel(single("BPF memory", "Kernel memory of every BPF program and map on the node, each once.", "bytes", 6,
			query(fmt.Sprintf("sum(%s{%s})", n.m("bpf.node.memory"), nodeSel), ""))).
		WithPanel(single("Maps", "Maps on the node at the latest scan.", "none", 6,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.maps"), nodeSel), ""))).
		WithPanel(single("Fullest map", "The fullest hash-family map's entries / max entries.", "percentunit", 6,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.map.fullness"), nodeSel), ""))).
		WithPanel(single("Map memory", "Kernel memory of the node's maps, each once.", "bytes", 6,
			query(fmt.Sprintf(`sum(%s{%s, bpf_memory_kind="map"})`, n.m("bpf.node.memory"), nodeSel), ""))).
		WithPanel(series("BPF memory by workload", "The maps each workload's programs use (each map once per workload; a map shared by several workloads is in each) and the programs' own memory (JIT image, instructions), by namespace, workload and executable; and the node's total, each map once. Maps no owned program uses have no workload.", "bytes", 12,
			memoryByWorkload(n, nodeSel)...)).
		WithPanel(series("Fullest maps", "The 10 fullest hash-family maps (entries / max entries) by name, type and workload, continued across reloads; hash, percpu_hash and hash_of_maps refuse new keys when full (BPFMapNearlyFull), LRU maps evict.", "percentunit", 12,
			query(fullestMaps(n, nodeSel, "instance", 10), fullestLegend))).
		WithPanel(series("Evicting maps", evictingDesc, "short", 12,
			query(evictingMaps(n, nodeSel, "instance", 10), fullestLegend)))

	b = b.WithRow(dashboard.NewRowBuilder("Agent")).
		WithPanel(series("Scan duration", "Time one scan took: median and 99th percentile.", "s", 12,
			query(fmt.Sprintf("histogram_quantile(0.5, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))", n.m("bpf.agent.scan.duration"), nodeSel), "p50"),
			query(fmt.Sprintf("histogram_quantile(0.99, sum by (le) (rate(%s_bucket{%s}[$__rate_interval])))", n.m("bpf.agent.scan.duration"), nodeSel), "p99"))).
		WithPanel(series("Stats tax and agent CPU", "CPUs the BPF stats accounting adds now (and would add always on), and the agent's own CPU.", "percentunit", 12,
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.stats.tax"), nodeSel), "stats tax"),
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.stats.tax.always"), nodeSel), "stats tax if always on"),
			query(fmt.Sprintf("max(%s{%s})", n.m("bpf.agent.cpu"), nodeSel), "agent CPU"))).
		WithPanel(series("Scans and errors", "Scans per second, and failed exports and scan errors per second.", "short", 12,
			query(fmt.Sprintf("sum(%s)", rate(n.m("bpf.agent.scans"), nodeSel)), "scans"),
			query(fmt.Sprintf("sum by (signal) (%s)", rate(n.m("bpf.agent.export.errors"), nodeSel)), "export errors {{signal}}"),
			query(fmt.Sprintf("sum(%s)", rate(n.m("bpf.agent.scan.errors"), nodeSel)), "scan errors")))
	return b
}

// Queries returns every panel query of a dashboard's JSON, keyed
// "<panel title> <refId>": what exporter/e2e runs against Prometheus.
func Queries(dashboardJSON []byte) (map[string]string, error) {
	var d struct {
		Panels []panelJSON `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("decoding dashboard: %w", err)
	}
	out := map[string]string{}
	var walk func([]panelJSON)
	walk = func(ps []panelJSON) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out[strings.TrimSpace(p.Title+" "+t.RefID)] = t.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

type panelJSON struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panelJSON `json:"panels"` // a collapsed row's
}
