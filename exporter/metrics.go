package exporter

import (
	"fmt"
	"slices"
	"strings"
)

// Level is how much detail the exporter sends: the operator's cardinality
// choice (a 10k-node fleet with 200 programs per node needs attach-type).
type Level int

const (
	// LevelAttachType exports per-attach-type aggregates and agent health.
	LevelAttachType Level = iota
	// LevelOwner adds per-owner (process / container / pod) aggregates.
	LevelOwner
	// LevelWorkload exports program metrics keyed by what survives a
	// reload or a pod restart (name, type, attach type and target class,
	// miss kind, owning workload or executable: stableDoc): the series
	// count does not grow with reloads. The default.
	LevelWorkload
	// LevelProgram exports every program (up to MaxPrograms) and link with
	// its identity (id, tag, pid, pod, container): for one node and
	// debugging, as every reload makes new series.
	LevelProgram
)

func (l Level) String() string {
	switch l {
	case LevelAttachType:
		return "attach-type"
	case LevelOwner:
		return "owner"
	case LevelWorkload:
		return "workload"
	case LevelProgram:
		return "program"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel parses the --metrics-level value.
func ParseLevel(s string) (Level, error) {
	for _, l := range allLevels {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("metrics level %q: want workload, program, owner or attach-type", s)
}

type instrumentKind int

const (
	kindCounter instrumentKind = iota // cumulative, monotonic
	kindGauge
	kindHistogram
)

func (k instrumentKind) String() string {
	return [...]string{"counter", "gauge", "histogram"}[k]
}

// Attribute sets shared by several metrics, named once so the doc and the
// code cannot disagree.
var (
	programAttrs = []string{
		"bpf.program.id", "bpf.program.name", "bpf.program.tag", "bpf.program.type",
		"bpf.attach.type", "bpf.attach.target", "bpf.program.sleepable", "bpf.miss.kind",
		"process.pid", "process.executable.name", "container.id", "k8s.pod.name", "k8s.namespace.name",
		"k8s.workload.kind", "k8s.workload.name",
	}
	linkAttrs = append([]string{"bpf.link.id", "bpf.link.type"}, programAttrs...)
	// workloadAttrs stay the same when a program is reloaded (new id, new
	// pod, new pid): the key of the workload level's series.
	workloadAttrs = []string{
		"bpf.program.name", "bpf.program.type", "bpf.attach.type", "bpf.attach.target", "bpf.miss.kind",
		"k8s.namespace.name", "k8s.workload.kind", "k8s.workload.name", "process.executable.name",
	}
	// infoAttrs join a program's identity to its workload series.
	infoAttrs      = append([]string{"bpf.program.id", "bpf.program.tag", "process.pid", "container.id", "k8s.pod.name"}, workloadAttrs...)
	ownerAttrs     = []string{"bpf.owner.key", "process.pid", "process.executable.name", "container.id", "k8s.pod.name", "k8s.namespace.name"}
	attachAttrs    = []string{"bpf.attach.type"}
	exportAttrs    = []string{"signal"}
	scanAttrs      = []string{"bpf.scan.source", "bpf.scan.fallback_reason"}
	noAttrs        = []string(nil)
	allLevels      = []Level{LevelAttachType, LevelOwner, LevelWorkload, LevelProgram}
	ownerLevels    = []Level{LevelOwner}
	workloadLevels = []Level{LevelWorkload}
	programLevels  = []Level{LevelProgram}
	floatValue     = true
	intValue       = false
	metricsDocHead = `# bpfleet metrics

Generated from the table in ` + "`exporter/metrics.go`" + ` by
` + "`go test ./exporter -run TestMetricsDoc -update`" + `; a test fails when this file and
the table disagree. There is no OpenTelemetry semantic convention for BPF: the
` + "`bpf.*`" + ` namespace is bpfleet's own. All counters are cumulative. Prometheus'
OTLP receiver turns ` + "`.`" + ` into ` + "`_`" + `, appends the unit (` + "`_seconds`" + `) and
` + "`_total`" + ` to counters, e.g. ` + "`bpf.program.run.time`" + ` →
` + "`bpf_program_run_time_seconds_total`" + `.

Levels (` + "`--metrics-level`" + `): ` + "`attach-type`" + ` exports the attach-type and agent
metrics only; ` + "`owner`" + ` adds the owner metrics; ` + "`workload`" + ` (the default) adds the
program and link metrics keyed by what survives a reload or a pod restart (program name, type,
attach type and the target's class, miss kind, the owning workload — namespace and controller —
and executable: "Series that stay put" below), their
counters summed across the programs' reloads since the agent started (a program loaded before
the agent counts its growth since, one loaded later all of its counts, so an agent restart is a
plain counter reset, never a spike of history); ` + "`program`" + ` keys them by program id
and owner instead (every reload makes new series: for one node and debugging). Both are capped
by ` + "`--max-programs`" + ` (series over the cap are counted in ` + "`bpf.agent.programs.dropped`" + `),
which also sets the SDK's cardinality limit.

Counters of a program (or workload key) first seen after it was loaded carry its load time as
their OTLP start time: Prometheus started with ` + "`--enable-feature=created-timestamp-zero-ingestion`" + `
writes a zero sample there, so ` + "`increase()`" + ` counts the misses of a program's first
interval. Gauges carry no start time.

Resource attributes: ` + "`service.name`" + ` (bpfleet-agent), ` + "`service.instance.id`" + ` (node
name, else host name: Prometheus keys series by it), ` + "`host.name`" + `, ` + "`host.arch`" + `,
` + "`host.cpu.model.name`" + `, ` + "`os.type`" + `, ` + "`os.version`" + ` (kernel release),
` + "`bpf.kernel.preempt`" + `, ` + "`k8s.node.name`" + ` (` + "`K8S_NODE_NAME`" + `),
` + "`k8s.cluster.name`" + ` (` + "`--cluster-name`" + `), then ` + "`OTEL_RESOURCE_ATTRIBUTES`" + ` /
` + "`OTEL_SERVICE_NAME`" + `, which win. The Helm chart adds the agent's own pod as
` + "`bpfleet.agent.pod.name`" + ` and ` + "`bpfleet.agent.pod.namespace`" + `: never as
` + "`k8s.pod.name`" + ` / ` + "`k8s.namespace.name`" + `, which on a data point name the program's
owner, and which a resource attribute of the same name would overwrite once
promoted to a label.

Exporters (` + "`OTEL_METRICS_EXPORTER`" + `): ` + "`otlp`" + ` (default), ` + "`prometheus`" + ` (served
at ` + "`http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics`" + `,
default ` + "`localhost:9464`" + `, with the same names as below), ` + "`console`" + `, ` + "`none`" + `.
Scraped, resource attributes are in ` + "`target_info`" + ` as over OTLP.

`
)

// metricDef is one row of the metrics table: everything the exporter
// registers and everything METRICS.md says.
type metricDef struct {
	Name        string
	Unit        string
	Kind        instrumentKind
	Float       bool
	Levels      []Level
	Attrs       []string
	Description string
}

// metricDefs is the one table of bpfleet's metrics. The exporter creates
// its instruments from it (see instruments.go) and METRICS.md is rendered
// from it.
var metricDefs = []metricDef{
	{"bpf.program.run.count", "{run}", kindCounter, intValue, programLevels, programAttrs,
		"Times the program ran (run_cnt); accrues only while BPF stats are enabled."},
	{"bpf.program.run.time", "s", kindCounter, floatValue, programLevels, programAttrs,
		"Time the program ran (run_time_ns), excluding trampoline / kprobe dispatch; accrues only while BPF stats are enabled."},
	{"bpf.program.recursion_misses", "{miss}", kindCounter, intValue, programLevels, programAttrs,
		"Runs the kernel skipped because the program's per-CPU recursion guard was held (recursion_misses, Linux 5.12+)."},
	{"bpf.link.missed", "{miss}", kindCounter, intValue, programLevels, linkAttrs,
		"Events a kprobe / kprobe.multi link missed (link info missed, Linux 6.7+)."},

	{"bpf.program.run.count", "{run}", kindCounter, intValue, workloadLevels, workloadAttrs,
		"Runs of the key's programs since the agent started, summed across reloads (a program loaded later: its run_cnt since it loaded)."},
	{"bpf.program.run.time", "s", kindCounter, floatValue, workloadLevels, workloadAttrs,
		"Run time of the key's programs, summed across reloads."},
	{"bpf.program.recursion_misses", "{miss}", kindCounter, intValue, workloadLevels, workloadAttrs,
		"Recursion misses of the key's programs, summed across reloads (Linux 5.12+)."},
	{"bpf.link.missed", "{miss}", kindCounter, intValue, workloadLevels, workloadAttrs,
		"kprobe link misses of the key's programs, summed across links and reloads (Linux 6.7+)."},
	{"bpf.program.info", "", kindGauge, intValue, workloadLevels, infoAttrs,
		"1 per loaded program, naming its identity beside its workload key (join on the key's labels); only with --program-info, as every reload adds series."},

	{"bpf.owner.run.count", "{run}", kindCounter, intValue, ownerLevels, ownerAttrs,
		"Runs of the owner's programs since the agent started."},
	{"bpf.owner.run.time", "s", kindCounter, floatValue, ownerLevels, ownerAttrs,
		"Run time of the owner's programs since the agent started."},
	{"bpf.owner.recursion_misses", "{miss}", kindCounter, intValue, ownerLevels, ownerAttrs,
		"Recursion misses of the owner's programs since the agent started."},
	{"bpf.owner.programs", "{program}", kindGauge, intValue, ownerLevels, ownerAttrs,
		"Programs the owner holds."},

	{"bpf.attach_type.run.count", "{run}", kindCounter, intValue, allLevels, attachAttrs,
		"Runs of all programs of the attach type since the agent started."},
	{"bpf.attach_type.run.time", "s", kindCounter, floatValue, allLevels, attachAttrs,
		"Run time of all programs of the attach type since the agent started."},
	{"bpf.attach_type.recursion_misses", "{miss}", kindCounter, intValue, allLevels, attachAttrs,
		"Recursion misses of all programs of the attach type since the agent started."},
	{"bpf.attach_type.link.missed", "{miss}", kindCounter, intValue, allLevels, attachAttrs,
		"kprobe link misses of all programs of the attach type since the agent started."},
	{"bpf.attach_type.programs", "{program}", kindGauge, intValue, allLevels, attachAttrs,
		"Programs of the attach type loaded now."},
	{"bpf.attach_type.overhead", "s", kindGauge, floatValue, allLevels, attachAttrs,
		"Cost the attach type adds to one triggered call on this node, measured by the agent's own calibration probes."},

	{"bpf.agent.scan.duration", "s", kindHistogram, floatValue, allLevels, noAttrs,
		"Time one scan of the kernel's programs, links and owners took."},
	{"bpf.agent.scans", "{scan}", kindCounter, intValue, allLevels, noAttrs,
		"Scans completed; stops growing when the agent is stuck."},
	{"bpf.agent.scan.source", "", kindGauge, intValue, allLevels, scanAttrs,
		"1, for the source the latest scan read programs from: iterator (one iter/bpf_prog read) or syscall, with the reason the iterator is not used."},
	{"bpf.agent.programs", "{program}", kindGauge, intValue, allLevels, noAttrs,
		"Programs the latest scan saw."},
	{"bpf.agent.links", "{link}", kindGauge, intValue, allLevels, noAttrs,
		"Links the latest scan saw."},
	{"bpf.agent.scan.errors", "{error}", kindCounter, intValue, allLevels, noAttrs,
		"Objects a scan could not read (not counting objects that vanished), plus failed scans."},
	{"bpf.agent.stats.enabled", "", kindGauge, intValue, allLevels, noAttrs,
		"1 while the kernel accrues run counts and run time (BPF_ENABLE_STATS fd or kernel.bpf_stats_enabled), else 0."},
	{"bpf.agent.stats.held", "", kindGauge, intValue, allLevels, noAttrs,
		"1 while this agent holds a BPF_ENABLE_STATS fd."},
	{"bpf.agent.programs.dropped", "{program}", kindGauge, intValue, allLevels, noAttrs,
		"Programs left out of the latest export by --max-programs (at the workload level: the programs of the keys left out), plus series the SDK's cardinality limit folded into otel.metric.overflow."},
	{"bpf.agent.shutdown", "", kindGauge, intValue, allLevels, noAttrs,
		"1 in the agent's final export when it stopped on SIGTERM (a drain, scale-down or uninstall), else 0: the alert rules do not page for an agent that left on purpose."},
	{"bpf.agent.spans.dropped", "{span}", kindCounter, intValue, allLevels, noAttrs,
		"Episode spans lost: not emitted because the node's span budget (--span-budget per minute) was spent, refused by a full export queue (OTEL_BSP_MAX_QUEUE_SIZE, 2,048 by default), or in a batch the backend did not take after the exporter's retries. Every span is delivered or counted here."},
	{"bpf.agent.export.errors", "{error}", kindCounter, intValue, allLevels, exportAttrs,
		"Failed exports to the OTLP backend, by signal (metrics, traces)."},

	{"bpf.agent.cpu", "", kindGauge, floatValue, allLevels, noAttrs,
		"Fraction of one CPU the agent process used over the last scan interval (user + system time, all threads)."},
	{"bpf.agent.stats.mode", "", kindGauge, intValue, allLevels, statsModeAttrs,
		"1, with the agent's --stats mode (always, sampled, off) as attribute: the alert rules tell stats off by choice from stats refused by it."},
	{"bpf.agent.stats.exact", "", kindGauge, intValue, allLevels, noAttrs,
		"1 when the latest interval's run counts and run times are the kernel's exact counts (stats on throughout: --stats=always, or another holder of stats such as a local bpfleet top in sampled mode), 0 when they are scaled from sampled windows in whole or in part; absent with --stats=off. Not an attribute of the run series, which would split in two at every change."},
	{"bpf.agent.stats.tax", "", kindGauge, floatValue, allLevels, noAttrs,
		"CPU seconds per second that BPF run-time stats accounting adds on this node now: Σ runs/s × measured stats cost per run of the program's kind × the agent's stats duty (1 always, window/period sampled). Absent when not measurable (stats held elsewhere, calibration off); see \"The stats tax\" below."},
	{"bpf.agent.stats.tax.always", "", kindGauge, floatValue, allLevels, noAttrs,
		"What bpf.agent.stats.tax would be with stats always on (the same sum with duty 1)."},
	{"bpf.program_type.stats.tax", "", kindGauge, floatValue, allLevels, programTypeAttrs,
		"bpf.agent.stats.tax of the programs of one program type."},
	{"bpf.program.profile.duration", "s", kindHistogram, floatValue, allLevels, identityAttrs,
		"Duration of the runs of a program chosen by --profile, timed by an fentry/fexit pair attached to it (probes/profiler), with global stats off: every run with --profile-window 0, else the runs inside the timing windows (default 1 s of 10 s; a lone counting fentry keeps the snapshot's run count exact between them), so the histogram's count is the timed runs; log2 buckets (2 ns .. 2^40 ns), percentiles within a factor of 2, plus the sampling error of a time sample when windowed. Only for the chosen programs, at every level."},
	{"bpf.agent.stats.cost", "s", kindGauge, floatValue, allLevels, statsKindAttrs,
		"Measured stats cost of one run (stats on minus off, alternated in the same calibration run) by kind: an attach type fired by its trigger, or xdp / tc through BPF_PROG_TEST_RUN."},
}

// stableDoc is the rule that keeps the workload level's keys free of
// per-instance values (workloadKeyOf, agent Program.TargetClass),
// checked under pod churn by exporter/e2e's TestPodChurnSeries.
const stableDoc = `## Series that stay put

At the ` + "`workload`" + ` level no key attribute names one instance of a program, process, container,
pod or interface: a reload, a pod restart or a rollout makes new programs, pids, cgroups and
interfaces, and no new series. Per attribute of the key:

| attribute | at the ` + "`workload`" + ` level | per-instance detail, kept in |
| --- | --- | --- |
| ` + "`bpf.program.name`" + ` | the kernel's name, with a suffix made per instance (after the last ` + "`_`, `-` or `.`" + `: 5 or more hex digits, a digit among them) as ` + "`*`" + ` | ` + "`program`" + ` level, spans, ` + "`list`" + ` |
| ` + "`bpf.program.type`, `bpf.attach.type`, `bpf.miss.kind`" + ` | as the kernel says | — |
| ` + "`bpf.attach.target`" + ` | the target's class (below; ` + "`list`" + `'s ` + "`target_class`" + `), or the target itself where it names nothing per instance (a function, a tracepoint) | ` + "`bpf.attach.target`" + ` at the ` + "`program`" + ` level and on spans, ` + "`attach_target`" + ` and each link's ` + "`target`" + ` in ` + "`list`" + ` and the API |
| ` + "`k8s.namespace.name`, `k8s.workload.kind`, `k8s.workload.name`" + ` | the owning pod's namespace and controller (a Deployment for its ReplicaSets, a CronJob for its Jobs; a pod without one: kind ` + "`Pod`" + ` and its name) | ` + "`k8s.pod.name`, `container.id`" + `: ` + "`program`" + ` level, spans, ` + "`bpf.program.info`" + ` |
| ` + "`process.executable.name`" + ` | the owner's executable's base name (else its command name), without ` + "` (deleted)`" + ` | ` + "`process.pid`" + `: ` + "`program`" + ` level, spans, ` + "`bpf.program.info`" + ` |

The class of a target:

| target | class |
| --- | --- |
| a cgroup of a pod the Kubernetes API names (its containers' too) | ` + "`<namespace>/<controller kind>/<controller name>`" + `: ` + "`shop/Deployment/web`" + ` |
| another pod's cgroup (either cgroup driver, any ` + "`--cgroup-root`" + `) | its QoS class: ` + "`kubepods/guaranteed`, `kubepods/burstable`, `kubepods/besteffort`" + `; the kubelet's own cgroups above the pods ` + "`kubepods`" + ` |
| a container of another runtime | the runtime: ` + "`docker`, `podman`, `containerd`, `cri-o`" + ` |
| a systemd unit (systemd's per-unit IPAddressDeny / DeviceAllow programs) | its innermost slice without an id in its name: ` + "`system.slice`, `user-1000.slice`, `machine.slice`" + ` |
| any other cgroup | its path below the cgroup2 mount, each component with an id in it (8 or more hex digits, a digit among them) as ` + "`*`" + `; the root ` + "`/`" + `. A cgroup link's cgroup is found from its id (` + "`open_by_handle_at`" + `, CAP_DAC_READ_SEARCH); without that: ` + "`cgroup`" + ` |
| an interface whose other end is in the network namespace of a pod the API names (a CNI's host end: ` + "`IFLA_LINK_NETNSID`" + `, a process in that namespace, its cgroup's pod UID) | ` + "`<driver>:<namespace>/<kind>/<name>`" + `: ` + "`veth:shop/Deployment/web`" + ` |
| an interface made per instance: a CNI's prefix (` + "`lxc`, `cali`, `veth`, `eni`, `gke`, `azv`, `vnet`, `tap`" + `) then 5 or more hex digits, or any name ending in 6 or more hex digits with a digit among them | ` + "`<driver>:<prefix>*`" + `, the driver as the kernel names it (` + "`IFLA_INFO_KIND`" + `; none for a physical device): ` + "`veth:lxc*`, `netkit:lxc*`, `veth:cali*`, `bridge:br-*`" + ` |
| any other interface | its name: ` + "`eth0`, `lo`, `cilium_host`, `flannel.1`" + ` |
| an interface the agent's view of the host lacks (gone, or in another namespace) | ` + "`ifindex`" + ` |
| a uprobe's binary | its path with the pid of ` + "`/proc/<pid>/root`" + `, container ids and overlay directories (64 hex), pod UIDs and containerd snapshot numbers as ` + "`*`" + ` |

An XDP program's mode and a tc filter's classful parent stay appended (` + "`veth:lxc* (generic)`" + `),
as several targets stay joined by commas. Interfaces are those of the host's network namespace
(the proc root's pid 1's, entered when the agent has a namespace of its own), each read once per
new link or owner refresh and cached by ifindex. A pod the API does not name yet (the pod cache
not synced, or no API access) counts under its QoS or interface class until it does: one key per
class, not one per pod. A program no process holds on a pod's cgroup or interface is owned by
that pod (` + "`k8s.*`" + ` from the API).

`

// seriesDoc states the series per node of each level, checked against a
// real Prometheus by exporter/e2e's fleet test (TestFleetSmall asserts the
// workload level's stay put across reloads; make bench BENCH=fleet prints
// the figures below).
const seriesDoc = `## Series per node

Prometheus series one node adds (the OTLP points of one export, plus ` + "`target_info`" + `), with
A attach types that have programs, C calibrated attach types, O owners, P programs exported,
P_m of them with a recursion_misses counter (Linux 5.12+: all), L kprobe links with a missed
count, K workload keys (distinct name, type, attach type and target class, miss kind, namespace,
workload, executable: see "Series that stay put"), K_m and K_l the keys with a misses counter and with kprobe links:

| level | series per node | grows with reloads |
| --- | --- | --- |
| ` + "`attach-type`" + ` | B + 5A + C | no |
| ` + "`owner`" + ` | B + 5A + C + 4O | by 4 per restarted owner (pid / container / pod) |
| ` + "`workload`" + ` (default) | B + 5A + C + 2K + K_m + K_l (+ P with ` + "`--program-info`" + `) | no (the info metric: by P per reload) |
| ` + "`program`" + ` | B + 5A + C + 2P + P_m + L | by 2P + P_m + L per reload of all programs |

B is the agent's own, 28–29 in the runs below: its gauges and counters, ` + "`bpf.agent.export.errors`" + ` for 2
signals, the scan duration histogram (12 buckets, +Inf, sum, count), ` + "`target_info`" + `, and with
calibration the stats-cost and stats-tax gauges (one per measured kind and program type). K ≤ P: K = P when every
program has its own name (the worst case), K ≪ P where one workload loads the same program many
times (per-endpoint or per-container programs).

Measured (` + "`make bench BENCH=fleet`" + `: 50 nodes exporting into Prometheus v0.316.0, per node
1,000 socket filters with distinct names and 100 pods (test/pods) with the 6 per-pod kinds of
program (runc's device program, cgroup_skb and cgroup_sock links, tc, tcx, XDP: 600 programs
under 21 keys), P = 1,600, K = 1,021, A = 7, C = 0; every program reloaded and every pod
restarted (new UIDs, container ids, interfaces) 10 times):

| level | series per node | head series, first export → after reloads | bytes per export per node (gzip / uncompressed) |
| --- | --- | --- | --- |
| ` + "`workload`" + ` | 3,127 | 156,350 → 156,350 after 10 reloads (50 nodes) | 28.1 KB / 608.6 KB |
| ` + "`program`" + ` | 4,864 | 24,320 → 96,320 after 3 reloads (5 nodes) | 102.2 KB / 1,593.6 KB |
| ` + "`workload`" + `, 100 names (K = 121) | 427 | 21,350 → 21,350 after 3 reloads (50 nodes) | 5.8 KB / 79.4 KB |

Exporter CPU per export per node: 5.3 ms at K = 1,021, 2.3 ms at K = 121; Go heap per exporter
4.2 MB at K = 1,021 (same run, shared 2-core machine: ratios, not absolutes), with bpfleet's own
encoder (attribute encodings kept between exports) and the program counters produced without
per-value SDK aggregation (through the SDK's OTLP/HTTP exporter one export of 1,000 real programs
took 21 ms at the workload level against 4.2, 26 against 5.6 at the program level: ` + "`make bench BENCH=agentcpu`" + `,
BenchmarkExport, in one process with the scan; gzip is about 1 ms of it).

Pod restarts alone (` + "`TestBenchFleetPodChurn`" + `: 300 pods with the 6 per-pod kinds, 1,800 programs,
restarted 3 times): per kind 12 series (9 for tc, tcx, XDP) in one generation and 12 (9) ever,
1.00×; keyed by cgroup path and interface name they would be 900 per kind in one generation and
3,600 ever (4.00×). ` + "`TestPodChurnSeries`" + ` (` + "`make test`" + `) checks the same with 12 pods.

`

// spanDoc documents the miss-episode span in METRICS.md.
const spanDoc = `## Spans

` + "`bpf.recursion_miss`" + `: one span per miss episode, from the first scan interval in which a
program's ` + "`recursion_misses`" + ` (source ` + "`recursion_misses`" + `) or a kprobe link's ` + "`missed`" + `
(source ` + "`link_missed`" + `) grew to the end of the last interval before it went quiet.

| attribute | meaning |
| --- | --- |
| ` + "`bpf.program.id`, `bpf.program.name`, `bpf.program.tag`, `bpf.program.type`, `bpf.attach.type`, `bpf.attach.target`, `bpf.program.sleepable`" + ` | the program as the episode opened |
| ` + "`bpf.link.id`" + ` | the link, for link_missed episodes |
| ` + "`bpf.episode.source`" + ` | recursion_misses or link_missed |
| ` + "`bpf.miss.kind`" + ` | recursion, contention-possible (sleepable program, PREEMPT_RT, or a guarded program on a fully preemptible kernel: another task on the CPU may have held the guard) or unknown |
| ` + "`bpf.episode.misses`, `bpf.episode.runs`" + ` | misses and runs in the episode |
| ` + "`bpf.episode.miss_ratio`" + ` | misses / (misses + runs) |
| ` + "`bpf.episode.peak_rate`" + ` | highest misses per second in one interval |
| ` + "`bpf.episode.intervals`, `bpf.episode.truncated`" + ` | intervals with misses, and how many of them were dropped from the events |
| ` + "`bpf.episode.ended_by`" + ` | quiet, vanished (program unloaded) or shutdown (the agent stopped while the episode was open) |

When a snapshot first has an episode open, a zero-length span ` + "`bpf.recursion_miss.open`" + ` with the
same program and owner attributes and the misses so far is emitted at once, so a long episode is
visible within one interval; the episode's final span links to it. Both carry the owner:
` + "`k8s.namespace.name`, `k8s.workload.kind`, `k8s.workload.name`, `k8s.pod.name`, `container.id`, `process.pid`, `process.executable.name`" + `.
At most ` + "`--span-budget`" + ` spans a minute (default 600) are emitted; the rest are counted in
` + "`bpf.agent.spans.dropped`" + ` and logged once per interval. Emitted spans wait in a bounded export
queue (the ` + "`OTEL_BSP_*`" + ` settings: 2,048 spans, batches of 512, every 5 s, 30 s per export by default);
a span the full queue refuses (a long backend outage) and every span of a batch the backend did not
take are counted in the same ` + "`bpf.agent.spans.dropped`" + `: each span is either delivered or counted.

Each interval with misses is a span event ` + "`bpf.miss.interval`" + ` with ` + "`bpf.episode.misses`" + `,
` + "`bpf.episode.runs`" + ` and ` + "`bpf.episode.rate`" + ` (misses per second).
`

// prometheusName is the name Prometheus' OTLP receiver gives the metric
// with its default translation (underscores, unit suffix, _total on
// counters); exporter/e2e checks these against a real Prometheus.
func (d metricDef) prometheusName() string {
	n := strings.ReplaceAll(d.Name, ".", "_")
	if d.Unit == "s" {
		n += "_seconds"
	}
	if d.Kind == kindCounter {
		n += "_total"
	}
	return n
}

// PrometheusNames returns the Prometheus names of the metrics exported at
// level l (a histogram by its _count series).
func PrometheusNames(l Level) []string {
	var out []string
	for _, d := range metricDefs {
		if !slices.Contains(d.Levels, l) {
			continue
		}
		n := d.prometheusName()
		if d.Kind == kindHistogram {
			n += "_count"
		}
		out = append(out, n)
	}
	return out
}

// MetricsDoc renders METRICS.md from the table.
func MetricsDoc() string {
	var b strings.Builder
	b.WriteString(metricsDocHead)
	b.WriteString("## Metrics\n\n| name | Prometheus name | unit | instrument | levels | attributes | description |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, d := range metricDefs {
		levels := make([]string, len(d.Levels))
		for i, l := range d.Levels {
			levels[i] = l.String()
		}
		attrs := "—"
		if len(d.Attrs) > 0 {
			attrs = "`" + strings.Join(d.Attrs, "`, `") + "`"
		}
		unit := "—"
		if d.Unit != "" {
			unit = "`" + d.Unit + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s | %s |\n", d.Name, d.prometheusName(), unit, d.Kind, strings.Join(levels, ", "), attrs, d.Description)
	}
	b.WriteString("\n")
	b.WriteString(statsTaxDoc)
	b.WriteString(stableDoc)
	b.WriteString(seriesDoc)
	b.WriteString(spanDoc)
	return b.String()
}
