package exporter

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/bpfleet/bpfleet/agent"
)

type instrumentKind int

const (
	kindCounter instrumentKind = iota // cumulative, monotonic
	kindGauge
	kindHistogram
)

func (k instrumentKind) String() string {
	return [...]string{"counter", "gauge", "histogram"}[k]
}

const (
	floatValue = true
	intValue   = false
)

// metricDef is one row of the metrics table: everything the exporter
// registers, where each value comes from, and everything METRICS.md says.
type metricDef struct {
	Name        string
	Unit        string
	Kind        instrumentKind
	Float       bool
	Levels      []Level
	Attrs       []string // keys: attrs.go
	Description string
	Value       source
}

// source is where a row's values come from: one of its fields is set, by
// the constructors below.
type source struct {
	// observe reads the row's values out of the latest view at each
	// collection (instruments.go).
	observe func(*view, sink)
	// counted reads them from the exporter's own counters at each
	// collection, before the first snapshot too.
	counted func(*Exporter, sink)
	// series: the seriesProducer's series of that kind (series.go),
	// without an instrument.
	series seriesKind
	// profile: the profileProducer's histograms (profile.go).
	profile bool
	// scan: a histogram Update records once per snapshot.
	scan bool
}

// fromView: observed from the latest view.
func fromView(f func(*view, sink)) source { return source{observe: f} }

// runsFromView: a run count or run time observed from the latest view,
// absent with --stats=off (not zero: the kernel did not count). Whether
// an interval's counts are exact or scaled from windows is
// bpf.agent.stats.exact, not an attribute of the run series: a series
// whose attributes flipped with other holders of stats coming and going
// would split in two (at the workload level both halves carrying the
// key's whole count). The seriesProducer leaves its run counters out
// likewise.
func runsFromView(f func(*view, sink)) source {
	return fromView(func(v *view, s sink) {
		if v.stats.mode != agent.StatsOff {
			f(v, s)
		}
	})
}

// fromExporter: observed from the exporter's own counters.
func fromExporter(f func(*Exporter, sink)) source { return source{counted: f} }

// produced: the seriesProducer's series of kind k: the program (program
// level) or workload (workload level) counters, and the memory,
// verified-instruction and map gauges.
func produced(k seriesKind) source { return source{series: k} }

var (
	// profiled: the profiler's histograms, from the profileProducer.
	profiled = source{profile: true}
	// recordedPerScan: the scan duration histogram, recorded by Update.
	recordedPerScan = source{scan: true}
)

// metricDefs is the one table of bpfleet's metrics. The exporter creates
// its instruments and producers' metrics from it (instruments.go,
// series.go, profile.go) and METRICS.md is rendered from it
// (metricsdoc.go). A name may have one row per level (the program metrics
// have other attributes at the workload level), never two at one level.
var metricDefs = []metricDef{
	{"bpf.program.run.count", "{run}", kindCounter, intValue, programLevels, programAttrs,
		"Times the program ran (run_cnt); accrues only while BPF stats are enabled.",
		produced(seriesRunCount)},
	{"bpf.program.run.time", "s", kindCounter, floatValue, programLevels, programAttrs,
		"Time the program ran (run_time_ns), excluding trampoline / kprobe dispatch; accrues only while BPF stats are enabled.",
		produced(seriesRunTime)},
	{"bpf.program.recursion_misses", "{miss}", kindCounter, intValue, programLevels, programMissAttrs,
		"Runs the kernel skipped because the program's per-CPU recursion guard was held (recursion_misses, Linux 5.12+), by bpf.miss.cause: the unexplained series always, another cause's once it counted; the causes add up to the kernel's counter (see \"Why a program missed\").",
		produced(seriesMisses)},
	{"bpf.link.missed", "{miss}", kindCounter, intValue, programLevels, linkAttrs,
		"Events a kprobe / kprobe.multi link missed (link info missed, Linux 6.7+), by bpf.link.miss.reason: nesting and maxactive where the agent reads the split, unknown (the whole sum) where it does not; a link's series add up to the kernel's missed.",
		produced(seriesLinkMissed)},

	{"bpf.program.run.count", "{run}", kindCounter, intValue, workloadLevels, workloadAttrs,
		"Runs of the key's programs since the agent started, summed across reloads (a program loaded later: its run_cnt since it loaded).",
		produced(seriesRunCount)},
	{"bpf.program.run.time", "s", kindCounter, floatValue, workloadLevels, workloadAttrs,
		"Run time of the key's programs, summed across reloads.",
		produced(seriesRunTime)},
	{"bpf.program.recursion_misses", "{miss}", kindCounter, intValue, workloadLevels, workloadMissAttrs,
		"Recursion misses of the key's programs, summed across reloads (Linux 5.12+), by bpf.miss.cause.",
		produced(seriesMisses)},
	{"bpf.link.missed", "{miss}", kindCounter, intValue, workloadLevels, workloadLinkAttrs,
		"kprobe link misses of the key's programs, summed across links and reloads (Linux 6.7+), one series per bpf.link.miss.reason (nesting, maxactive, unknown), adding up to the sum.",
		produced(seriesLinkMissed)},
	{"bpf.program.info", "", kindGauge, intValue, workloadLevels, infoAttrs,
		"1 per loaded program, naming its identity beside its workload key (join on the key's labels); only with --program-info, as every reload adds series.",
		fromView(func(v *view, s sink) {
			for _, a := range v.info {
				s.Int(1, a)
			}
		})},

	{"bpf.map.memory", "By", kindGauge, intValue, programLevels, mapAttrs,
		"Kernel memory of the map (fdinfo memlock: the kernel's map_mem_usage()), one series per owner group (namespace, workload, executable) of the programs that use it: see \"Maps\" below.",
		produced(seriesMapMemory)},
	{"bpf.map.entries", "{entry}", kindGauge, intValue, programLevels, mapAttrs,
		"Elements in the map, for the hash family (hash, percpu_hash, lru_hash, lru_percpu_hash, hash_of_maps) where the kernel counts them (bpf_map_sum_elem_count, Linux 6.6+) or --map-count-bound walks them; absent otherwise.",
		produced(seriesMapEntries)},
	{"bpf.map.max_entries", "{entry}", kindGauge, intValue, programLevels, mapAttrs,
		"The map's max_entries.",
		produced(seriesMapCapacity)},
	{"bpf.map.fullness", "1", kindGauge, floatValue, programLevels, mapAttrs,
		"Entries / max entries, where entries are known.",
		produced(seriesMapFullness)},
	{"bpf.map.evictions", "{entry}", kindCounter, intValue, programLevels, mapAttrs,
		"Entries an LRU hash map (lru_hash, lru_percpu_hash) evicted, counted by the agent's own probe (fexit on htab_lru_map_delete_node; the kernel keeps no count) from the probe's attach, the series' start time: a map older than the agent has its evictions since then. Absent for other types and where the kernel refuses the probe (bpfleet maps says why). An LRU evicts in batches before it looks full: see \"Maps\" below.",
		produced(seriesMapEvictions)},
	{"bpf.map.updates.refused", "{update}", kindCounter, intValue, programLevels, mapAttrs,
		"Updates of a hash-family map the kernel refused because it was full (E2BIG) or out of memory (ENOMEM), from programs and syscalls, counted by the agent's own probes (fexit on the hash family's update functions) from their attach, the series' start time. Only with --map-refusals (a trampoline on every hash update: opt-in); absent for other types.",
		produced(seriesMapRefused)},
	{"bpf.program.memory", "By", kindGauge, intValue, programLevels, programMemAttrs,
		"Kernel memory of the program: bpf.memory.kind=program its own (its fdinfo memlock, which holds the translated instructions, + JIT image), map the maps it uses (each once).",
		produced(seriesMemory)},
	{"bpf.program.verified_insns", "{instruction}", kindGauge, intValue, programLevels, programAttrs,
		"Instructions the verifier processed to load the program (Linux 5.16+): how close it came to the verifier's limit.",
		produced(seriesInsns)},

	{"bpf.map.memory", "By", kindGauge, intValue, workloadLevels, mapWorkloadAttrs,
		"Kernel memory of the key's maps (same name less a per-instance suffix, same type, used by programs of the same workload), each map once.",
		produced(seriesMapMemory)},
	{"bpf.map.entries", "{entry}", kindGauge, intValue, workloadLevels, mapWorkloadAttrs,
		"Elements in the key's hash-family maps, summed; absent where no map of the key has a count.",
		produced(seriesMapEntries)},
	{"bpf.map.max_entries", "{entry}", kindGauge, intValue, workloadLevels, mapWorkloadAttrs,
		"max_entries of the key's maps, summed.",
		produced(seriesMapCapacity)},
	{"bpf.map.fullness", "1", kindGauge, floatValue, workloadLevels, mapWorkloadAttrs,
		"The fullest of the key's maps (entries / max entries).",
		produced(seriesMapFullness)},
	{"bpf.map.evictions", "{entry}", kindCounter, intValue, workloadLevels, mapWorkloadAttrs,
		"Evictions of the key's LRU hash maps since the probe's attach, summed over the maps the node has now (a map that goes takes its count with it, which a rate reads as a counter reset).",
		produced(seriesMapEvictions)},
	{"bpf.map.updates.refused", "{update}", kindCounter, intValue, workloadLevels, mapWorkloadAttrs,
		"Refused updates of the key's hash-family maps since the probes' attach, summed over the maps the node has now (--map-refusals).",
		produced(seriesMapRefused)},
	{"bpf.program.memory", "By", kindGauge, intValue, workloadLevels, workloadMemAttrs,
		"Kernel memory of the key's loaded programs: kind program their own, summed; map the maps they use, each once.",
		produced(seriesMemory)},
	{"bpf.program.verified_insns", "{instruction}", kindGauge, intValue, workloadLevels, workloadAttrs,
		"The most instructions the verifier processed for any of the key's loaded programs (Linux 5.16+).",
		produced(seriesInsns)},

	{"bpf.owner.memory", "By", kindGauge, intValue, ownerLevels, ownerMemAttrs,
		"Kernel memory of the owner's programs: kind program their own, map the maps they use, each once.",
		produced(seriesMemory)},

	{"bpf.owner.run.count", "{run}", kindCounter, intValue, ownerLevels, ownerAttrs,
		"Runs of the owner's programs since the agent started.",
		runsFromView(aggInt(ownerSeries, accRuns))},
	{"bpf.owner.run.time", "s", kindCounter, floatValue, ownerLevels, ownerAttrs,
		"Run time of the owner's programs since the agent started.",
		runsFromView(aggSeconds(ownerSeries))},
	{"bpf.owner.recursion_misses", "{miss}", kindCounter, intValue, ownerLevels, ownerMissAttrs,
		"Recursion misses of the owner's programs since the agent started, by bpf.miss.cause.",
		fromView(aggCauses(ownerSeries))},
	{"bpf.owner.programs", "{program}", kindGauge, intValue, ownerLevels, ownerAttrs,
		"Programs the owner holds.",
		fromView(aggInt(ownerSeries, programCount))},

	{"bpf.attach_type.run.count", "{run}", kindCounter, intValue, allLevels, attachAttrs,
		"Runs of all programs of the attach type since the agent started.",
		runsFromView(aggInt(attachSeries, accRuns))},
	{"bpf.attach_type.run.time", "s", kindCounter, floatValue, allLevels, attachAttrs,
		"Run time of all programs of the attach type since the agent started.",
		runsFromView(aggSeconds(attachSeries))},
	{"bpf.attach_type.recursion_misses", "{miss}", kindCounter, intValue, allLevels, attachMissAttrs,
		"Recursion misses of all programs of the attach type since the agent started, by bpf.miss.cause.",
		fromView(aggCauses(attachSeries))},
	{"bpf.attach_type.link.missed", "{miss}", kindCounter, intValue, allLevels, attachAttrs,
		"kprobe link misses of all programs of the attach type since the agent started.",
		fromView(aggInt(attachSeries, accLinkMissed))},
	{"bpf.attach_type.programs", "{program}", kindGauge, intValue, allLevels, attachAttrs,
		"Programs of the attach type loaded now.",
		fromView(aggInt(attachSeries, programCount))},
	{"bpf.attach_type.overhead", "s", kindGauge, floatValue, allLevels, attachAttrs,
		"Cost the attach type adds to one triggered call on this node, measured by the agent's own calibration probes.",
		fromView(func(v *view, s sink) {
			for i := range v.attach {
				if o := v.attach[i].overhead; o != nil {
					s.Float(*o, v.attach[i].attrs)
				}
			}
		})},

	{"bpf.node.memory", "By", kindGauge, intValue, allLevels, memoryKindAttrs,
		"Kernel memory of every BPF program (kind program) and every map (kind map) on the node, each once: maps only their programs use, pinned maps, maps a process holds by fd alone. The map figure only where the agent reads maps (not with --no-maps).",
		fromView(observeNodeMemory)},
	{"bpf.agent.maps", "{map}", kindGauge, intValue, allLevels, noAttrs,
		"Maps the latest scan saw (absent with --no-maps).",
		fromView(func(v *view, s sink) {
			if v.node.mapsRead {
				s.Int(int64(v.node.count), empty)
			}
		})},
	{"bpf.agent.map_scan.source", "", kindGauge, intValue, allLevels, scanAttrs,
		"1, for the source the latest scan read maps from: iterator (one iter/bpf_map read) or syscall, with the reason the iterator is not used.",
		fromView(func(v *view, s sink) {
			if v.node.mapsRead {
				s.Int(1, v.node.source)
			}
		})},

	{"bpf.agent.misswatch.available", "", kindGauge, intValue, allLevels, noAttrs,
		"1 while the miss watcher runs (hardware watchpoints on the watched programs' miss counters), 0 where it is off (--miss-watch=false) or the kernel refuses it (the reason: /v1/snapshot miss_watch.reason, bpfleet misses); every miss is then unexplained.",
		fromView(func(v *view, s sink) { s.Int(b2i(v.missWatch.Available), empty) })},
	{"bpf.agent.misswatch.watched", "{program}", kindGauge, intValue, allLevels, noAttrs,
		"Programs the miss watcher watched in the latest interval (at most its slots: the debug registers free on every CPU).",
		fromView(func(v *view, s sink) { s.Int(int64(len(v.missWatch.Watched)), empty) })},
	{"bpf.agent.misswatch.samples", "{miss}", kindCounter, intValue, allLevels, noAttrs,
		"Misses the watcher sampled and explained, since the agent started.",
		fromView(func(v *view, s sink) { s.Int(int64(v.missWatch.Samples), empty) })},
	{"bpf.agent.misswatch.over_budget", "{miss}", kindCounter, intValue, allLevels, noAttrs,
		"Watchpoint hits past the watcher's budget (--miss-budget per CPU per program per interval), counted and not sampled: they are among the unexplained misses.",
		fromView(func(v *view, s sink) { s.Int(int64(v.missWatch.OverBudget), empty) })},

	{"bpf.agent.scan.duration", "s", kindHistogram, floatValue, allLevels, noAttrs,
		"Time one scan of the kernel's programs, links and owners took.",
		recordedPerScan},
	{"bpf.agent.scans", "{scan}", kindCounter, intValue, allLevels, noAttrs,
		"Scans completed; stops growing when the agent is stuck.",
		fromView(func(v *view, s sink) { s.Int(v.scans, empty) })},
	{"bpf.agent.scan.source", "", kindGauge, intValue, allLevels, scanAttrs,
		"1, for the source the latest scan read programs from: iterator (one iter/bpf_prog read) or syscall, with the reason the iterator is not used.",
		fromView(func(v *view, s sink) { s.Int(1, v.scanSource) })},
	{"bpf.agent.programs", "{program}", kindGauge, intValue, allLevels, noAttrs,
		"Programs the latest scan saw.",
		fromView(func(v *view, s sink) { s.Int(int64(v.programsSeen), empty) })},
	{"bpf.agent.links", "{link}", kindGauge, intValue, allLevels, noAttrs,
		"Links the latest scan saw.",
		fromView(func(v *view, s sink) { s.Int(int64(v.linksSeen), empty) })},
	{"bpf.agent.scan.errors", "{error}", kindCounter, intValue, allLevels, noAttrs,
		"Objects a scan could not read (not counting objects that vanished), plus failed scans, and scans whose map read failed (their map figures are absent).",
		fromView(func(v *view, s sink) { s.Int(v.scanErrors, empty) })},
	{"bpf.agent.stats.enabled", "", kindGauge, intValue, allLevels, noAttrs,
		"1 while the kernel accrues run counts and run time (BPF_ENABLE_STATS fd or kernel.bpf_stats_enabled), else 0.",
		fromView(func(v *view, s sink) { s.Int(b2i(v.statsEnabled), empty) })},
	{"bpf.agent.stats.held", "", kindGauge, intValue, allLevels, noAttrs,
		"1 while this agent holds a BPF_ENABLE_STATS fd.",
		fromView(func(v *view, s sink) { s.Int(b2i(v.statsHeld), empty) })},
	{"bpf.agent.programs.dropped", "{program}", kindGauge, intValue, allLevels, noAttrs,
		"Programs left out of the latest export by --max-programs (at the workload level: the programs of the keys left out), plus series over the cardinality limit (2 × the cap + 64 per metric): an instrument's folded into otel.metric.overflow by the SDK, the map, memory and verified-instruction gauges' left out.",
		fromView(func(v *view, s sink) { s.Int(int64(v.dropped)+v.overflowed, empty) })},
	{"bpf.agent.shutdown", "", kindGauge, intValue, allLevels, noAttrs,
		"1 in the agent's final export when it stopped on SIGTERM (a drain, scale-down or uninstall), else 0: the alert rules do not page for an agent that left on purpose.",
		fromView(func(v *view, s sink) { s.Int(b2i(v.shutdown), empty) })},
	{"bpf.agent.spans.dropped", "{span}", kindCounter, intValue, allLevels, noAttrs,
		"Episode spans lost: not emitted because the node's span budget (--span-budget per minute) was spent, refused by a full export queue (OTEL_BSP_MAX_QUEUE_SIZE, 2,048 by default), or in a batch the backend did not take after the exporter's retries. Every span is delivered or counted here.",
		fromView(func(v *view, s sink) { s.Int(v.spansDropped, empty) })},
	{"bpf.agent.export.errors", "{error}", kindCounter, intValue, allLevels, exportAttrs,
		"Failed exports to the OTLP backend, by signal (metrics, traces).",
		fromExporter(func(e *Exporter, s sink) {
			s.Int(e.metricErrs.Load(), signalMetrics)
			s.Int(e.traceErrs.Load(), signalTraces)
		})},

	{"bpf.agent.cpu", "", kindGauge, floatValue, allLevels, noAttrs,
		"Fraction of one CPU the agent process used over the last scan interval (user + system time, all threads).",
		fromView(func(v *view, s sink) { s.Float(v.stats.agentCPU, empty) })},
	{"bpf.agent.stats.mode", "", kindGauge, intValue, allLevels, statsModeAttrs,
		"1, with the agent's --stats mode (always, sampled, off) as attribute: the alert rules tell stats off by choice from stats refused by it.",
		fromView(func(v *view, s sink) {
			if v.stats.mode != "" {
				s.Int(1, attribute.NewSet(attribute.String(attrStatsMode, string(v.stats.mode))))
			}
		})},
	{"bpf.agent.stats.exact", "", kindGauge, intValue, allLevels, noAttrs,
		"1 when the latest interval's run counts and run times are the kernel's exact counts (stats on throughout: --stats=always, or another holder of stats such as a local bpfleet top in sampled mode), 0 when they are scaled from sampled windows in whole or in part; absent with --stats=off. Not an attribute of the run series, which would split in two at every change.",
		fromView(func(v *view, s sink) {
			if v.stats.mode != "" && v.stats.mode != agent.StatsOff {
				s.Int(b2i(v.stats.counts == agent.CountsExact), empty)
			}
		})},
	{"bpf.agent.stats.tax", "", kindGauge, floatValue, allLevels, noAttrs,
		"CPU seconds per second that BPF run-time stats accounting adds on this node now: Σ runs/s × measured stats cost per run of the program's kind × the agent's stats duty (1 always, window/period sampled). Absent when not measurable (stats held elsewhere, calibration off); see \"The stats tax\" below.",
		fromView(func(v *view, s sink) {
			if v.stats.tax.Known {
				s.Float(v.stats.tax.CPUShare, empty)
			}
		})},
	{"bpf.agent.stats.tax.always", "", kindGauge, floatValue, allLevels, noAttrs,
		"What bpf.agent.stats.tax would be with stats always on (the same sum with duty 1).",
		fromView(func(v *view, s sink) {
			if v.stats.tax.Known && v.stats.tax.Duty > 0 {
				s.Float(v.stats.tax.AlwaysCPUShare, empty)
			}
		})},
	{"bpf.program_type.stats.tax", "", kindGauge, floatValue, allLevels, programTypeAttrs,
		"bpf.agent.stats.tax of the programs of one program type.",
		fromView(func(v *view, s sink) {
			for _, t := range v.stats.tax.ByProgramType {
				s.Float(t.CPUShare, attribute.NewSet(attribute.String(attrProgramType, t.ProgramType)))
			}
		})},
	{profileMetric, "s", kindHistogram, floatValue, allLevels, identityAttrs,
		"Duration of the runs of a program chosen by --profile, timed by an fentry/fexit pair attached to it (probes/profiler), with global stats off: every run with --profile-window 0, else the runs inside the timing windows (default 1 s of 10 s; a lone counting fentry keeps the snapshot's run count exact between them), so the histogram's count is the timed runs; log2 buckets (2 ns .. 2^40 ns), percentiles within a factor of 2, plus the sampling error of a time sample when windowed. Only for the chosen programs, at every level.",
		profiled},
	{"bpf.agent.stats.cost", "s", kindGauge, floatValue, allLevels, statsKindAttrs,
		"Measured stats cost of one run (stats on minus off, alternated in the same calibration run) by kind: an attach type fired by its trigger, or xdp / tc through BPF_PROG_TEST_RUN.",
		fromView(func(v *view, s sink) {
			for _, c := range v.stats.costs {
				if c.Measured {
					s.Float(c.TaxNs/1e9, attribute.NewSet(attribute.String(attrStatsKind, c.Kind)))
				}
			}
		})},
}
