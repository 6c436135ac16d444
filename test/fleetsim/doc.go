// Package fleetsim is a fleet of simulated nodes that export exactly what
// real agents export, and keeps the truth it fed (issue 45). Test-only: no
// product package imports it.
//
// Each node replays a snapshot recorded on a real kernel (testdata, one per
// kernel release: Recordings, Recording; README.md says how they are
// recorded, on the host and in the kernel matrix's guests) through the
// agent's real export path: its own exporter.New at the workload level
// (the agent's default), with the node's resource (host.name and
// k8s.node.name the node's name, os.version the recorded kernel's release,
// PoolAttr its pool), Update with the node's scan each round, and
// ForceFlush as the round's export over OTLP/HTTP (gzip), with the
// resend rule (Config.ResendUnchanged) as the agent has it. With
// Config.Spans the nodes' miss episodes (opened where a program's misses
// grow, closed after two quiet rounds, when the program unloads or the
// agent stops) go out as the agent's spans (OTLP traces).
//
// A node runs its pool's program sets (Role): the recorded programs of
// each role, per node (RoleBase, RoleSecurity: the security agent's LSM,
// fentry, kprobe, tracepoint programs and the recursion canary) or per pod
// (RoleCNI: tc, tcx, XDP, cgroup_skb, cgroup_sock per endpoint; RoleRunc:
// the device program), owned as the agent's attribution owns them (the
// CNI's and security agent's DaemonSet pods, the pod itself for runc's).
// A miss plan with a cause other than unexplained needs a kernel whose
// recorded miss watcher ran (New refuses it elsewhere).
// Counters advance each round by Config.Interval at the recorded rates
// (a program idle when recorded gets a rate drawn from the seed), scaled
// per node and program from Config.Seed: the same seed, the same fleet.
//
// The motion, between rounds:
//
//	f, err := fleetsim.New(ctx, fleetsim.Config{Seed: 1, Endpoint: collectorURL, Pools: []fleetsim.Pool{
//		{Name: "web", Kernel: "6.18.44-fc-v1300", Nodes: 60, Roles: []fleetsim.Role{fleetsim.RoleCNI, fleetsim.RoleRunc}, Pods: 8},
//		{Name: "sec", Kernel: "7.2.13+deb14-amd64", Nodes: 40, Roles: []fleetsim.Role{fleetsim.RoleSecurity}},
//	}, PodChurn: 0.1, Misses: []fleetsim.MissPlan{{Program: "canary", Cause: agent.CauseInterrupt, Pool: "sec", From: 2, PerRound: 50}}})
//	defer f.Close(ctx)
//	f.Round(ctx)                          // every node scans and exports once
//	f.Upgrade("on_tp_btf_sys_e", "0123456789abcdef", 10) // 10 nodes a round: new ids, new tag
//	f.RestartAgents(ctx, f.PoolNodes("web")[:10]...)     // counters start over
//	f.Join(ctx, "web", 5); f.Leave(ctx, "web-0003")
//	f.Cut("sec", true)                    // the pool's exports fail (counted) until Cut("sec", false)
//	f.Stall(true, "web-0001"); f.Degrade(true, false, "web-0002")
//	t := f.Truth()
//
// Truth answers what a fleet query must: per program name across the
// fleet (ProgramTruth: the workload-level counters' sums over the nodes in
// the fleet, the last round's ns per run and CPU share, how many nodes run
// it, the worst node, and what the kernels counted in all); misses by
// program, cause and node with the node's pool, kernel, the pod of the
// program's owner and the first round the cause grew (MissTruth); the
// calibrated overhead per attach type by kernel and pool (OverheadTruth);
// and each node's state, absent (left, or cut off), stalled or degraded,
// with the reason, and its episodes opened and closed (NodeTruth). Counters follow the workload level's rule
// (exporter/METRICS.md): an agent restart starts a node's counters over,
// and a program loaded before the agent started counts from its first
// scan. Rates in a backend divide by wall time between rounds
// (Truth.RoundTimes), the truth's by Interval.
//
// History: with Config.Start the fleet runs on a simulated clock, round r
// at Start + r × Interval, and the agents stamp every point with it
// (exporter.Config.Clock); the motion lands half an Interval before a
// round's scan. A bench starts an hour back and runs its rounds as fast as
// they go: a store holds an hour of samples in minutes (Prometheus' head
// takes nothing older than its newest less an hour: start within the
// hour, and write nothing stamped now first). Config.Mirror has every
// gate send each export to a second store too: one fleet's exporters
// feed Prometheus and VictoriaMetrics at the cost of one.
//
// Round runs as soon as it is called: the short test's rounds go as fast
// as the exports do. A Pacer starts rounds on a wall-clock tick instead
// (the benches: every Interval, as agents export; BenchPace), so a
// backend sees a fleet's exports, rule evaluations and its own per-second
// work in a real fleet's proportions, and a 5-minute cut lasts 5 minutes.
package fleetsim
