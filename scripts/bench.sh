#!/usr/bin/env bash
# bench.sh: the figures bpfleet states in docs/performance.md (the README
# quotes the headline ones) and notes — its own cost as ratios against a floor
# measured in the same run, and races against other tools' wall time. Nothing
# here is a pass/fail gate: these machines are shared and noisy, so a figure is
# printed with its baseline, never asserted (`make test` holds the correctness
# checks).
#
#   make bench                  # every section
#   make bench BENCH=list,scan  # some sections
#
# Each section prints its figures; lines of Go test output that carry
# figures start with BENCH.
set -euo pipefail
cd "$(dirname "$0")/.."
export BPFLEET_CACHE=${BPFLEET_CACHE:-/var/cache/bpfleet}
want=${BENCH:-all}

section() { printf '\n== bench: %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
selected() { [[ $want == all || ,$want, == *,$1,* ]]; }

scripts/install-deps.sh >/dev/null

if selected list; then
	section "list: bpfleet list -o json against bpftool prog show -j, 1,000 and 10,000 programs; bpfleet maps -o json against bpftool map show -j, 30,000 maps"
	go test -tags bench -count=1 -timeout 20m -run 'TestBenchListAgainstBpftool|TestBenchMapsAgainstBpftool' -v ./cmd/bpfleet | grep -E 'BENCH|FAIL|ok'
fi

if selected scan; then
	section "scan: the agent's scan and first read against the syscall floor, 1,000 programs"
	# Scan: steady scans (the stats table while nothing is loaded or
	# unloaded), ScanWalk: every scan walks (the same run's baseline);
	# SteadyRead/IterRead: the reader alone, the same two ways; Run: one
	# stats table read per variant (rdonly_cast, probe_read).
	go test -count=1 -run X -bench 'Scan$|ScanWalk' ./agent
	go test -count=1 -run X -bench 'FirstScan|SteadyRead|IterRead' ./agent/internal/reader
	go test -count=1 -run X -bench 'Run' ./probes/statstable
fi

if selected iterator; then
	section "iterator: the bpf_prog stats iterator (scan source) against the syscall floor and path, 1,000 programs"
	# IterRead: the iterator scan source alone; OneShot: New + one scan +
	# Close (what list pays) from the iterator vs from syscalls;
	# LoadCached: loading the iterator with its CO-RE result cached; Links:
	# the bpf_link iterator against the per-link syscalls, steady and first.
	go test -count=1 -run X -bench 'OneShot' ./agent
	go test -count=1 -run X -bench 'IterRead|Links' ./agent/internal/reader
	go test -count=1 -run X -bench 'LoadCached|Read' ./probes/progstats
fi

if selected maps; then
	section "maps: the steady read of 3,000 maps (per map) against the steady program read (per program, 1,000 programs), same loop"
	# x-prog: ns/map over ns/prog, the issue's bound is 1; fdinfo/read:
	# memory figures read again per steady read (0 when no map changed).
	go test -count=1 -run X -bench 'SteadyMapsVsProgs' -benchtime 400x ./probes/mapstats
	# After the read: the snapshot's maps (shared entries, the join) and
	# the exporter's map and memory work, steady and with maps moving.
	go test -count=1 -run X -bench 'MapBuild' -benchmem -benchtime 2000x ./agent
	go test -count=1 -run X -bench 'UpdateMaps' -benchmem -benchtime 1000x ./exporter
fi

if selected owners; then
	section "owners: task_file iterator against the /proc walk"
	go test -count=1 -run X -bench . ./probes/taskfile
	go test -count=1 -run X -bench . ./agent/owners
fi

if selected attach; then
	section "attach: per-attach-type overhead, stats off and on (kernel-driven trigger)"
	make -s build
	bin/bpfleet bench --mode kernel --stats both
fi

if selected statstax; then
	section "statstax: the stats tax per run (off/on alternated), --stats modes on a no-op xdp run flat out, sampled run counts of a steady program"
	make -s build
	bin/bpfleet bench --tax --mode kernel
	go test -tags bench -count=1 -timeout 5m -run 'TestBenchStatsModes' -v ./agent | grep -E 'BENCH|FAIL|ok'
fi

if selected mappressure; then
	section "mappressure: the eviction and refused-update counters' cost per evicting insert and per hash update (kernel matrix, sid-amd64 under TCG; the host refuses fexit)"
	# Twins in one guest: rounds alternate the probe detached and attached.
	# TCG timings: read the ratios, not the ns (docs/scan.md, "Evictions").
	work=${TMPDIR:-/tmp}/bpfleet-bench-mappressure
	make -s test-kernels KERNELS=sid-amd64 KERNEL_FLAGS="-packages ./probes/mappressure -tags bench -run Cost -cmd none -work $work"
	grep -ah 'per insert without\|per update without' "$work/sid-amd64/console.log" | sed 's/.*"Output":"//; s/\\n"}.*$//; s/^ *cost_bench_test.go:[0-9]*: //' | sort -u || true
fi

if selected profiler; then
	section "profiler: its cost per run against the stats tax (kernel matrix, sid-amd64 and sid-arm64 under TCG; the host refuses fentry)"
	# Each variant against stats on measured around it, same VM run: the
	# floors (empty fentry; empty fentry+fexit), the pair and fsession
	# timing every run / 1 in 8 / 1 in 64, windowed timing. TCG timings:
	# read the ratios, not the ns.
	work=${TMPDIR:-/tmp}/bpfleet-bench-profiler
	make -s test-kernels KERNELS=sid-amd64,sid-arm64 KERNEL_FLAGS="-packages ./probes/profiler -tags bench -cmd none -work $work"
	for e in sid-amd64 sid-arm64; do
		echo "-- $e"
		grep -ah 'cost: \|clock: ' "$work/$e/console.log" | sed 's/.*"Output":"//; s/\\n"}.*$//; s/^ *cost_bench_test.go:[0-9]*: //' | sort -u || true
	done
	echo "-- host (no trampoline allowed): two bpf_ktime_get_ns against the stats tax"
	go test -tags bench -count=1 -run TestClockCostAgainstStats -v ./probes/profiler | grep -E 'clock:|SKIP|FAIL' || true
fi

if selected fleet; then
	section "fleet: 50 nodes x 1,000 programs and 100 pods reloaded into a real Prometheus, directly and through a Collector (series, bytes, CPU); 300 pods restarted 3 times (series ever per kind)"
	go test -tags bench -count=1 -timeout 20m -run 'TestBenchFleet|TestBenchAgentProcess' -v ./exporter/e2e | grep -E 'BENCH|FAIL|ok'
	section "fleet: 100, 300 and 1,000 simulated nodes replaying snapshots recorded on 5.10, 6.1, 6.18 and 7.2 (test/fleetsim) through a real Collector into a real Prometheus with the shipped rules (per-node cost with and without the rules, marginal cost, rollouts, 100 agents restarted at once, a pool cut off for 5 minutes), and into a replicated VictoriaMetrics; rounds paced every 10 s (about 60 min)"
	# BPFLEET_FLEET_PACE=0 runs the rounds as fast as the exports go (any
	# duration: that tick); BPFLEET_FLEET_EVAL the rules' interval (1m);
	# BPFLEET_FLEET_STEADY the steady phases' rounds (18); BPFLEET_FLEET_SIZES.
	go test -tags bench -count=1 -timeout 100m -run 'TestBenchFleetSim' -v ./test/fleetsim | grep -E 'BENCH|FAIL|ok'
	section "fleet: bpfleet fleet top, misses, overhead and nodes against Prometheus and a replicated VictoriaMetrics holding an hour of 100, 300 and 1,000 simulated nodes (test/fleetsim, backfilled on its simulated clock): p50 and p99 of up to 40 refreshes each, answers held to the truth"
	go test -tags bench -count=1 -timeout 60m -run 'TestBenchFleetQueries' -v ./cmd/bpfleet | grep -E 'BENCH|FAIL|ok'
fi

if selected vmfaults; then
	section "vmfaults: a storage node of the replicated VictoriaMetrics killed for 60s, the gateway Collector restarted; one real agent, the canary's misses as the truth"
	# BPFLEET_BENCH_OUTAGE sets the storage node's outage (default 60s).
	go test -tags bench -count=1 -timeout 15m -run 'TestBenchVMFaults' -v ./exporter/e2e | grep -E 'BENCH|FAIL|ok'
fi

if selected scale; then
	section "scale: one real bpfleet agent at 1,000, 3,000 and 10,000 programs (a mix of unattached, cgroup, tcx and XDP programs) with 3 maps each, defaults, into a real Prometheus: scan times, CPU per program per scan, RSS, series and bytes per export"
	# BPFLEET_BENCH_SCALE=1000,3000,10000 picks the sizes, BPFLEET_BENCH_WINDOW
	# (default 60s) the window each size is measured over.
	go test -tags bench -count=1 -timeout 30m -run 'TestBenchScale' -v ./exporter/e2e | grep -E 'BENCH|FAIL|ok'
fi

if selected agentcpu; then
	section "agentcpu: one real bpfleet agent at 1,000 programs (50 reloaded every 30 s) and 3,000 maps (twins without maps and reading them every scan beside it), --interval 10s, into a real Prometheus: CPU % of one core, RSS, profile breakdown; RSS over 10,000 scans"
	# BPFLEET_BENCH_BASELINE=/path/to/other/bpfleet runs that build beside
	# this one in the same window (a before/after ratio from one run);
	# BPFLEET_BENCH_WINDOW (default 120s); BPFLEET_BENCH_PROFILES keeps the
	# CPU profiles.
	go test -tags bench -count=1 -timeout 20m -run 'TestBenchAgentCPU|TestBenchAgentRSS|TestBenchAgentProcessRSS' -bench 'Export' -benchtime 100x -v ./exporter/e2e | grep -E 'BENCH|Benchmark|FAIL|ok'
fi
