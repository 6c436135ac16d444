package exporter

import (
	"fmt"
	"strings"
)

// METRICS.md is the metrics table (metrics.go) rendered, then the prose
// below; exporter/internal/gendocs writes it, TestMetricsDoc holds the
// committed file to it.
//go:generate go run ./internal/gendocs -metrics METRICS.md

// metricsDocHead opens METRICS.md: names, levels, start times, the
// resource and the exporters.
const metricsDocHead = `# bpfleet metrics

Generated from the table in ` + "`exporter/metrics.go`" + ` by ` + "`go generate ./exporter`" + `
(` + "`make generate`" + `); a test fails when this file and the table disagree. There is no
OpenTelemetry semantic convention for BPF: the ` + "`bpf.*`" + ` namespace is bpfleet's own. All
counters are cumulative. Prometheus'
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

Pushed series that did not move: over OTLP (and to the console) a program or workload counter
series, and a memory, verified-instruction or map series, goes out in every export in which
a value of it moved, and otherwise every ` + "`--resend-unchanged`" + ` (30 s; ` + "`0`" + `: every series in
every export), in the final export at shutdown, and at its first. The agent's own metrics, the
owner and attach-type aggregates and the node totals go out in every export. Most programs on a
node are idle in any 10 s, and each series is about 200 bytes of attributes to encode and
compress: an idle series costs the agent, the wire and the backend a third as much, while any
1-minute window still holds two points of it (the chart's dashboards give their panels a
1-minute min interval, so their ` + "`$__rate_interval`" + ` is longer) and a backend's 5-minute
lookback always finds it. A moving series is as fresh as ever. Scraped
(` + "`OTEL_METRICS_EXPORTER=prometheus`" + `), every series is in every scrape: one missing
would be marked stale.

Resource attributes: ` + "`service.name`" + ` (bpfleet-agent), ` + "`service.instance.id`" + ` (node
name, else host name: Prometheus keys series by it), ` + "`host.name`" + ` (the node's name where
` + "`K8S_NODE_NAME`" + ` is set, else the hostname: in a pod that is the pod's name), ` + "`host.arch`" + `,
` + "`host.cpu.model.name`" + `, ` + "`os.type`" + `, ` + "`os.version`" + ` (kernel release),
` + "`bpf.kernel.preempt`" + `, ` + "`k8s.node.name`" + ` (` + "`K8S_NODE_NAME`" + `),
` + "`k8s.cluster.name`" + ` (` + "`--cluster-name`" + `), ` + "`k8s.nodepool.name`" + ` (from the first of
` + "`--node-pool-labels`" + ` that the agent's Node carries, read once at start), then
` + "`OTEL_RESOURCE_ATTRIBUTES`" + ` /
` + "`OTEL_SERVICE_NAME`" + `, which win, but for ` + "`bpfleet.agent.pod.name`" + `, ` + "`k8s.pod.name`" + ` and
` + "`k8s.pod.uid`" + `, which the agent leaves out (and says so once): the resource names the
node, never the agent's pod, whose name changes at every rollout and would renew
every series wherever resource attributes are labels. The Helm chart adds the
release's namespace as ` + "`bpfleet.agent.pod.namespace`" + `: never as ` + "`k8s.namespace.name`" + `,
which on a data point names the program's owner, and which a resource attribute
of the same name would overwrite once promoted to a label.

Exporters (` + "`OTEL_METRICS_EXPORTER`" + `): ` + "`otlp`" + ` (default), ` + "`prometheus`" + ` (served
at ` + "`http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics`" + `,
default ` + "`localhost:9464`" + `, with the same names as below), ` + "`console`" + `, ` + "`none`" + `.
Scraped, resource attributes are in ` + "`target_info`" + ` as over OTLP.

`

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

// linkMissDoc says what each bpf.link.miss.reason means and what to do
// about it (agent/internal/prog: LinkMissNesting...; the split is read by
// probes/linkstats, checked in the kernel matrix by test/kernels/ktest's
// TestKretprobeMaxactive and TestKprobeLinkMissed).
const linkMissDoc = `## Why a kprobe link missed

A kprobe link's ` + "`missed`" + ` (link info, Linux 6.7+) adds up two unrelated counters of the
kernel's trace_kprobe; ` + "`bpf.link.missed`" + ` carries them apart as ` + "`bpf.link.miss.reason`" + `, a
closed set whose series add up to the kernel's ` + "`missed`" + `:

| reason | what the kernel counted | what to do |
| --- | --- | --- |
| ` + "`nesting`" + ` | the kprobe hit while another kprobe was running on that CPU, and was skipped (the kprobe's ` + "`nmissed`" + `): a probed function reached from inside another probe's handler or BPF program, e.g. a kprobe program doing a map operation on a function another link probes; for a kprobe.multi entry probe, ftrace recursion too. (A run turned away because the CPU's ` + "`bpf_prog_active`" + ` was held, by another program or by a map operation from a syscall, is counted in the program's ` + "`bpf.program.recursion_misses`" + `, not here.) | look for another probe (kprobe, kretprobe, kprobe.multi) on that CPU's path: a probe on a function the other probe's program calls (map helpers, ` + "`bpf_*`" + ` kernel functions) misses every time; move one of them (fentry/fexit do not share kprobes' per-CPU guard) |
| ` + "`maxactive`" + ` | a kretprobe entry found all of its instances in use (that many calls of the function already in flight, typically asleep in it) and its return went unseen (the kretprobe's ` + "`nmissed`" + `; always 0 for a plain kprobe) | raise the kretprobe's maxactive (` + "`r<N>:`" + ` in ` + "`kprobe_events`" + `, ` + "`RetprobeMaxActive`" + ` in cilium/ebpf, which needs the tracefs path; the perf PMU path takes the kernel's default, about 2 × CPUs) or trace the return with fexit, which has no such limit |
| ` + "`unknown`" + ` | the sum, where the agent cannot tell the two apart: links read by syscall (` + "`BPF_OBJ_GET_INFO_BY_FD`" + ` gives only the sum; the ` + "`iter/bpf_link`" + ` iterator reads the parts), and kprobe.multi return probes, whose one fprobe counter mixes recursion with exhausted return slots | where the iterator loads (Linux 5.19+), unknown is only the kprobe.multi return probes' |

At the ` + "`program`" + ` level a link has the ` + "`nesting`" + ` and ` + "`maxactive`" + ` series where the split is
known and one ` + "`unknown`" + ` series where it is not; at the ` + "`workload`" + ` level a key with kprobe links has
all three. The snapshot's JSON carries the same split (` + "`links[].missed_nesting`" + `,
` + "`missed_maxactive`" + `: null where unknown; ` + "`delta.link_missed_by`" + `; a link_missed episode's
` + "`link_missed_by`" + `).

`

// mapsDoc is the rollup rule of the memory and map metrics (memory.go,
// agent.MapMemory), checked by TestMapRollups and exporter/e2e's
// TestMapsToPrometheus.
const mapsDoc = `## Maps and memory

BPF maps and programs live in kernel memory that no process's RSS shows, and a full hash map
makes updates fail: the program drops what it meant to record. The agent reads every map on the
node every ` + "`--map-interval`" + ` (30 s; at the next scan when a program was loaded or unloaded)
with ` + "`iter/bpf_map`" + `, else one syscall walk (` + "`bpf.agent.map_scan.source`" + ` says which), without
holding its fds. Pushed over OTLP, a ` + "`bpf.map.*`" + `, ` + "`bpf.program.memory`" + `, ` + "`bpf.owner.memory`" + ` or
` + "`bpf.program.verified_insns`" + ` series goes out when it moved and at least every ` + "`--resend-unchanged`" + `
("Pushed series that did not move" below), so between reads only as often as that; a program load
makes the next scan read, so a new key's memory is not late; ` + "`bpf.node.memory`" + ` at every export;
scraped, every series at every scrape. ` + "`--no-maps`" + ` turns it off, and every map
figure is then absent, not zero. A map's memory is the kernel's own figure (fdinfo ` + "`memlock`" + `, ` + "`map_mem_usage()`" + `); its
entries are the kernel's element count for the hash family (` + "`bpf_map_sum_elem_count`" + `, Linux 6.6+;
on older kernels only with ` + "`--map-count-bound`" + `, a walk of the keys), absent for other types, and
then so is its fullness (entries / max entries). A program's own memory (` + "`bpf.memory.kind`" + `
program) is what the kernel charges it: its fdinfo ` + "`memlock`" + ` (` + "`prog->pages * PAGE_SIZE`" + `: the
whole ` + "`struct bpf_prog`" + ` with its translated instructions, page-rounded) plus its JIT image
(` + "`jited_size`" + `, allocated apart from those pages); ` + "`xlated_size`" + ` is not added, being inside
` + "`memlock`" + ` (where fdinfo is unreadable: JIT image plus ` + "`xlated_size`" + `, the floor). The maps it
uses are kind map.

**Rollup rule: a map shared by several programs is counted once per node and once per rollup
it belongs to.** Programs use maps through their ` + "`map_ids`" + `:

| rollup | a map counts |
| --- | --- |
| ` + "`bpf.node.memory`" + ` (every level) | once per node, with or without programs (pinned maps, maps a process holds by fd alone) |
| a program (` + "`bpf.program.memory{bpf.memory.kind=\"map\"}`" + `, ` + "`program`" + ` level) | once in each program that uses it |
| a workload key (` + "`bpf.program.memory`" + `, ` + "`workload`" + ` level) | once per key, however many of the key's programs use it |
| an owner (` + "`bpf.owner.memory`" + `) | once per owner |
| a map series (` + "`bpf.map.*`" + `) | once per owner group of the programs that use it: namespace, workload kind and name, executable (a map with no owned program: one series without them). At the ` + "`workload`" + ` level the series is keyed by the map's name (a suffix made per instance as ` + "`*`" + `, as program names) and type and that group, never by id: a reloaded map continues its series; memory, entries and max entries are summed over the key's maps, fullness is the fullest. At the ` + "`program`" + ` level each map has its id. |

So the map rows of one workload sum to that workload's map memory with each map once, and
summing a rollup across rollups counts a shared map as often as it is shared: the node total is
` + "`bpf.node.memory`" + `, never a sum of the others. Map series are not chosen by
` + "`--max-programs`" + ` (one per map and owner group at the ` + "`program`" + ` level, one per name, type
and owner group at the ` + "`workload`" + ` level), only held to the cardinality limit it sets
(2 × the cap + 64 series per metric): series over it are left out and
counted in ` + "`bpf.agent.programs.dropped`" + `.

Which maps fail when full: ` + "`hash`, `percpu_hash`, `hash_of_maps`" + ` refuse a new key (-E2BIG)
once at max entries (BPFMapNearlyFull alerts on them); ` + "`lru_hash`" + ` and ` + "`lru_percpu_hash`" + ` evict
the least recently used key instead (full is their steady state), in batches and before they
look full: ` + "`bpf.map.evictions`" + ` counts them (BPFMapEvicting), and with ` + "`--map-refusals`" + `
` + "`bpf.map.updates.refused`" + ` counts the refused updates (BPFMapRefusingUpdates); arrays are always full.

`

// seriesDoc states the series per node of each level, checked against a
// real Prometheus by exporter/e2e's fleet test (TestFleetSmall asserts the
// workload level's stay put across reloads; make bench BENCH=fleet prints
// the figures below).
const seriesDoc = `## Series per node

Prometheus series one node adds (the OTLP points of an export that has them all, at least every
` + "`--resend-unchanged`" + `, plus ` + "`target_info`" + `), with
A attach types that have programs, C calibrated attach types, O owners, P programs exported,
P_m of them with a recursion_misses counter (Linux 5.12+: all), L kprobe links with a missed
count, K workload keys (distinct name, type, attach type and target class, miss kind, namespace,
workload, executable: see "Series that stay put"), K_m and K_l the keys with a misses counter and with kprobe links,
L_s the kprobe links whose missed the agent splits by reason (two series each: "Why a kprobe link missed");
M map series ("Maps and memory": at the ` + "`program`" + ` level about one per map, at the ` + "`workload`" + ` level one per map name, type and
workload), M_h of them with entries (the hash family):

| level | series per node | grows with reloads |
| --- | --- | --- |
| ` + "`attach-type`" + ` | B + 5A + C | no |
| ` + "`owner`" + ` | B + 5A + C + 6O | by 6 per restarted owner (pid / container / pod) |
| ` + "`workload`" + ` (default) | B + 5A + C + 5K + K_m + 3K_l + 2M + 2M_h (+ P with ` + "`--program-info`" + `) | no (the info metric: by P per reload) |
| ` + "`program`" + ` | B + 5A + C + 5P + P_m + L + L_s + 2M + 2M_h | by 5P + P_m + L + L_s + 2M + 2M_h per reload of all programs and their maps |

5K and 5P: run count, run time, memory of two kinds, verified instructions (Linux 5.16+). B is the
agent's own, 28–29 in the runs below, 4 more since the map metrics (` + "`bpf.node.memory`" + ` of two
kinds, ` + "`bpf.agent.maps`, `bpf.agent.map_scan.source`" + `), which the measured figures below
predate: its gauges and counters, ` + "`bpf.agent.export.errors`" + ` for 2
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
3,600 ever (4.00×). ` + "`TestPodChurnSeries`" + ` (` + "`make test`" + `) checks the same with 12 pods (since the
memory series, 20 series per kind, 15 for tc, tcx, XDP, in one generation and ever: its agent reads no
maps, so ` + "`bpf.program.memory`" + ` of kind program and ` + "`bpf.program.verified_insns`" + ` add 2 per key).

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

A ` + "`recursion_misses`" + ` episode also carries its misses by cause (above): ` + "`bpf.miss.cause.recursion`" + `,
` + "`bpf.miss.cause.interrupt`, `bpf.miss.cause.preempted`, `bpf.miss.cause.nested`, `bpf.miss.cause.unexplained`" + `
(every cause, adding up to ` + "`bpf.episode.misses`" + `), ` + "`bpf.miss.cause`" + ` the dominant one (the explained
cause with the most misses; ` + "`unexplained`" + ` where none was explained) and
` + "`bpf.miss.context.<task|softirq|hardirq|nmi>`" + ` the sampled misses by the context of the run turned
away. Its most frequent kernel stacks are span events ` + "`bpf.miss.stack`" + ` (` + "`bpf.miss.cause`" + `,
` + "`bpf.miss.context`" + `, ` + "`bpf.episode.misses`" + `: samples with that stack, ` + "`bpf.miss.stack`" + `: the frames,
innermost first, one per line) and its most frequent turned-away tasks ` + "`bpf.miss.task`" + `
(` + "`process.pid`, `process.executable.name`, `container.id`, `k8s.pod.name`, `k8s.namespace.name`, `bpf.episode.misses`" + `),
at most 5 of each.
`

// causeDoc says what each miss cause means and what to do about it.
const causeDoc = `
## Why a program missed

Every recursion-miss counter (` + "`bpf.program.recursion_misses`" + ` at the program and workload levels,
` + "`bpf.owner.recursion_misses`, `bpf.attach_type.recursion_misses`" + `) carries ` + "`bpf.miss.cause`" + `, one of
a closed set; the causes of a series add up to the kernel's counter exactly, so
` + "`sum without (bpf_miss_cause) (...)`" + ` is the count without causes. Each series has its
` + "`unexplained`" + ` cause always (the whole count where nothing was explained: a node without the
miss watcher has exactly the series it had before causes) and another cause once it counted.
The miss watcher (` + "`--miss-watch`" + `, on by default) puts a hardware watchpoint on the per-CPU miss
counter of the programs with an open miss episode, as many as the CPU's debug registers allow,
and explains each miss it samples (at most ` + "`--miss-budget`" + ` per CPU, program and interval) by the
kernel stack of the run turned away (` + "`bpfleet misses`" + ` shows them one by one).

| cause | what happened | what to do |
| --- | --- | --- |
| ` + "`recursion`" + ` | the program's own code is on the stack of the run turned away: it re-entered itself, directly, through a helper, or through another program or a map operation that hits the function it traces | fix the program: do not trace what the program calls itself (the map operation, ` + "`bpf_trace_printk`" + `), or filter the re-entry out; these runs are lost every time the path is taken |
| ` + "`interrupt`" + ` | a hardirq, softirq or NMI hit the CPU while the interrupted context was running the program, and the interrupt's run was turned away | usually harmless and rare; if the lost runs matter, attach where interrupts are not traced, or keep the program short so the window is small |
| ` + "`preempted`" + ` | the holder of the program's per-CPU guard is not on the CPU's stack: another task was preempted or slept inside the program (sleepable programs, PREEMPT_RT, full or lazy preemption; tracepoint programs run with only migration disabled since Linux 7.0). Nothing recursed: runs were lost to contention | avoid sleepable programs (or sleeping helpers) on hot paths; on PREEMPT_RT or full preemption pin or raise the priority of the tasks that run the program, or choose the kernel's preemption model (` + "`preempt=voluntary`" + `) where the lost runs matter more than latency |
| ` + "`nested`" + ` | a kprobe, tracepoint or perf program turned away because something else (another program, a map operation from a syscall) held the CPU's ` + "`bpf_prog_active`" + ` | look at the stack's holder: another tool's program on the same path; move one of them to fentry/fexit, which is guarded per program |
| ` + "`unexplained`" + ` | counted by the kernel, not sampled: the program was not watched (no free debug register, the watcher off or refused by the kernel: ` + "`bpf.agent.misswatch.available`" + ` 0), the miss came before the agent started, or the watcher's budget was spent (` + "`bpf.agent.misswatch.over_budget`" + `) | nothing by itself: the alert rules treat it as before causes existed; watch the program (` + "`bpfleet misses PROG`" + `) to learn its cause |

The alert rules page on ` + "`recursion`" + ` (and on ` + "`unexplained`" + `, which may hide it), warn on ` + "`preempted`" + `.
`

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
	b.WriteString(linkMissDoc)
	b.WriteString(mapsDoc)
	b.WriteString(seriesDoc)
	b.WriteString(causeDoc)
	b.WriteString(spanDoc)
	b.WriteString(lossDoc)
	return b.String()
}

// lossDoc is the one list of where the agent can lose data and the metric
// (or attribute) that counts each loss.
const lossDoc = `
## What can be lost, and where it is counted

Nothing the agent drops goes uncounted:

| where | what is lost | counted in | tested by |
| --- | --- | --- | --- |
| the span budget | episode spans over ` + "`--span-budget`" + ` a minute | ` + "`bpf.agent.spans.dropped`" + ` | ` + "`TestSpanBudget`" + ` |
| the span export queue | a span the full queue refuses (a long backend outage), every span of a batch the backend did not take after the exporter's retries | ` + "`bpf.agent.spans.dropped`" + ` | ` + "`TestSpanQueueCountsEveryLoss`" + `, ` + "`TestSpansDeliveredOrCounted`" + ` (real Jaeger), ` + "`TestSoakFlappingCollector`" + ` |
| a metric export | the points of an export the backend refused or never answered; the counters are cumulative, so the next export that gets through carries the totals | ` + "`bpf.agent.export.errors{signal=\"metrics\"}`" + ` | ` + "`TestBackendFaults`" + `; the totals recovered: ` + "`TestSoakFlappingCollector`" + ` (real Prometheus) |
| ` + "`--max-programs`" + ` and the SDK's cardinality limit | program series (or workload keys) left out of an export; series over the limit left out or folded into ` + "`otel.metric.overflow`" + ` | ` + "`bpf.agent.programs.dropped`" + ` | ` + "`TestMaxProgramsDropsAndCounts`" + ` |
| a scan | an object the scan could not read (one that vanished meanwhile is not a loss), or the whole scan, or its maps (every map figure then absent, not zero) | ` + "`bpf.agent.scan.errors`" + `; ` + "`bpf.agent.scans`" + ` stops growing | ` + "`TestScanErrorsCounted`" + `, ` + "`TestNoMapsNoMapSeries`" + ` (maps); a vanished object is no error: ` + "`TestTransientClassification`" + `, ` + "`TestLinksChurningUnderScan`" + ` |
| an episode's events | intervals beyond the first 64 of one episode | the span's ` + "`bpf.episode.truncated`" + ` | ` + "`TestEpisodeIntervalsBounded`" + ` |
| the sampled mode's record of an interval | more stats events than it keeps: the interval is estimated, not exact | ` + "`bpf.agent.stats.exact`" + ` is 0 for it | ` + "`TestCoverageSpan`" + ` |
| the miss watcher's budget | samples of misses past ` + "`--miss-budget`" + ` per CPU, program and interval, and misses of programs not watched: still counted by the kernel's counter | the ` + "`unexplained`" + ` cause; ` + "`bpf.agent.misswatch.over_budget`" + ` | ` + "`TestMissCauseSeries`" + ` (the sum over causes) |
| the load/unload watcher's ring | overwritten load or unload records: the next scan walks every program, so no count is lost | the API's ` + "`scan.walk_reason`" + ` ("load/unload records lost") | ` + "`TestSteadyReadLost`" + ` |

Spans and metrics a Collector accepted and lost itself (a Collector killed before it forwarded
them) are beyond the agent's sight: count them with the Collector's own telemetry.
`
