//go:build !lean

// The agent command, in-process: built into bpfleet-agent (no build tags)
// and left out of the CLI build (-tags lean, agent_exec.go), which execs it.

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/agent/kube"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
)

func init() {
	c := config.DefaultAgent()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: scan every interval, export to OpenTelemetry",
		Long: `agent scans the kernel's BPF programs every --interval, holds BPF run-time
stats on as --stats says, and exports metrics and miss-episode spans over OTLP.

OTLP is configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_EXPORTER_OTLP_{METRICS,TRACES}_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_METRIC_EXPORT_INTERVAL, OTEL_RESOURCE_ATTRIBUTES,
OTEL_SERVICE_NAME, ...); --otlp-endpoint and --otlp-protocol override them.
OTEL_METRICS_EXPORTER=prometheus serves the metrics for scraping instead, at
http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics
(localhost:9464); OTEL_{METRICS,TRACES}_EXPORTER=console prints, none drops.
Every flag and OTEL_* variable is checked before anything starts: a bad one
is refused with one line naming it (exit status 2), all of them at once.
With no endpoint the agent says so once and keeps scanning (and serving its
local API). SIGTERM or SIGINT ends open miss episodes and flushes.

With K8S_NODE_NAME set (the chart sets it from the downward API) owners get
pod names from the pods of that node, watched with the pod's ServiceAccount,
or with the kubeconfig $KUBECONFIG names on a host outside any pod, and the
resource gets k8s.nodepool.name from the node's pool label (--node-pool-labels,
read once at start) unless OTEL_RESOURCE_ATTRIBUTES names it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scanFlagsSet(cmd, &c.Scan)
			if err := c.Resolve(config.Env); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			return runAgent(ctx, c, log)
		},
	}
	f := cmd.Flags()
	registerScanFlags(cmd, &c.Scan)
	f.DurationVar(&c.Interval, "interval", c.Interval, fmt.Sprintf("time between scans, at least %v (a scan of 1,000 programs costs about 4 ms of CPU: %v keeps the agent under 1%% of a CPU)", config.MinScanInterval, config.MinScanInterval))
	f.DurationVar(&c.ExportInterval, "export-interval", 0, fmt.Sprintf("metric export interval, at least %v (0: OTEL_METRIC_EXPORT_INTERVAL, else --interval); exports run right after a scan, at most one per scan", config.MinExportInterval))
	f.DurationVar(&c.MapInterval, "map-interval", c.MapInterval, "time between reads of the node's BPF maps (memory, entries, fullness); a scan reads them sooner when a program was loaded or unloaded (0: every scan)")
	f.DurationVar(&c.ResendUnchanged, "resend-unchanged", c.ResendUnchanged, "how often a pushed (OTLP, console) program or workload counter, memory or map series whose values did not move is sent again; series that move go out in every export (0: every series in every export)")
	f.StringVar(&c.LevelName, "metrics-level", c.LevelName, "metrics detail: workload (program series that survive reloads), program (one series set per program id: debugging), owner or attach-type")
	f.IntVar(&c.MaxPrograms, "max-programs", c.MaxPrograms, "most programs (--metrics-level=program) or program keys (workload) exported, and the SDK's cardinality limit (0: no cap); the rest are counted in bpf.agent.programs.dropped")
	f.BoolVar(&c.ProgramInfo, "program-info", false, "at --metrics-level=workload, also export bpf.program.info (one series per program id: new series with every reload)")
	f.IntVar(&c.SpanBudget, "span-budget", c.SpanBudget, "most miss-episode spans per minute (0: no cap); the rest are counted in bpf.agent.spans.dropped")
	f.BoolVar(&c.MissWatch, "miss-watch", c.MissWatch, "explain recursion misses: hardware watchpoints on the miss counters of programs with a miss episode, each sampled miss classified by its kernel stack (needs CAP_PERFMON; reported unavailable where the kernel refuses)")
	f.BoolVar(&c.MapPressure, "map-pressure", c.MapPressure, "count each LRU hash map's evictions with an fexit program that runs only when an LRU map evicts (counts start with the agent; reported unavailable where the kernel refuses trampolines)")
	f.BoolVar(&c.MapRefusals, "map-refusals", c.MapRefusals, "with --map-pressure, also count each hash map's updates refused as full (E2BIG) or out of memory (ENOMEM), from programs and syscalls: an fexit program on every hash map update of the node (measured +47% on an update of an existing key in a qemu guest), so off by default")
	f.IntVar(&c.MissBudget, "miss-budget", c.MissBudget, "most misses the watcher samples per CPU per watched program per interval (at least 1); the rest are counted as unexplained")
	f.StringVar(&c.Compression, "otlp-compression", "", "gzip or none (default: OTEL_EXPORTER_OTLP_COMPRESSION, else gzip)")
	f.BoolVar(&c.Console, "console", false, "also print metrics and spans to stdout")
	f.StringVar(&c.OTLPEndpoint, "otlp-endpoint", "", "OTLP base URL, e.g. http://collector:4318, or host:port with grpc (overrides OTEL_EXPORTER_OTLP_ENDPOINT)")
	f.StringVar(&c.OTLPProtocol, "otlp-protocol", "", "grpc or http/protobuf (overrides OTEL_EXPORTER_OTLP_PROTOCOL)")
	f.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "k8s.cluster.name resource attribute (default $K8S_CLUSTER_NAME)")
	f.StringSliceVar(&c.NodePoolLabels, "node-pool-labels", c.NodePoolLabels, "node labels tried in order for the k8s.nodepool.name resource attribute, read once from the agent's Node (K8S_NODE_NAME; needs get on nodes) unless OTEL_RESOURCE_ATTRIBUTES names it (empty: do not read the node)")
	f.StringVar(&c.APIAddr, "api-addr", c.APIAddr, "address of the local read-only HTTP API (empty: off); a non-loopback address needs --api-token-file")
	f.StringVar(&c.APITokenFile, "api-token-file", "", fmt.Sprintf("file holding the bearer token the local API requires (at least %d bytes; default $%s)", config.MinTokenLen, api.TokenEnv))
	f.BoolVar(&c.Calibrate, "calibrate", c.Calibrate, "measure each attach type's overhead with the agent's own probes at start (bounded: about half a second of CPU)")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long the final flush may take")
	f.StringVar(&c.Pprof, "pprof", "", "serve Go runtime profiles (net/http/pprof) on this loopback address, e.g. 127.0.0.1:6060 (empty: off)")
	f.StringVar((*string)(&c.Stats.Mode), "stats", string(c.Stats.Mode), "BPF run-time stats: always (exact, taxes every run of every program), sampled (on for --stats-window of every --stats-period, counts scaled) or off (misses, attach types and owners only)")
	f.DurationVar(&c.Stats.Window, "stats-window", c.Stats.Window, "with --stats=sampled: how long stats stay on in each period")
	f.DurationVar(&c.Stats.Period, "stats-period", c.Stats.Period, "with --stats=sampled: how often a stats window opens")
	f.StringSliceVar(&c.Profile.Selectors, "profile", nil, "programs to time with fentry/fexit (probes/profiler), exported as a histogram: "+config.ProfileSelectors+" (comma separated)")
	f.DurationVar(&c.Profile.Window, "profile-window", c.Profile.Window, "with --profile: time runs only for this window of every --profile-period (runs stay exactly counted; outside windows a run pays one fentry, less than the stats tax); 0: time every run (2.8-4.5x the stats tax per profiled run under TCG)")
	f.DurationVar(&c.Profile.Period, "profile-period", c.Profile.Period, "with --profile-window: how often a timing window opens")
	rootCmd.AddCommand(cmd)
}

// runAgent runs the agent with a validated configuration. The API socket
// is bound first: a taken port fails before anything is loaded or logged.
func runAgent(ctx context.Context, c config.Agent, log *slog.Logger) error {
	var latest atomic.Pointer[agent.Snapshot]
	hist := history.New(history.Capacity(history.Window, c.Interval)) // per-program history for /v1/programs/{id}/history
	// Liveness is the scan loop advancing: each pass, a failed scan
	// included, stamps lastPass; the start counts as one so that a slow
	// start (pod cache sync, first scan) has the same bound.
	var lastPass atomic.Int64
	lastPass.Store(time.Now().UnixNano())
	liveBound := config.LivenessBound(c.Interval)
	health := func() error {
		if age := time.Since(time.Unix(0, lastPass.Load())); age > liveBound {
			return fmt.Errorf("the scan loop made no pass for %s (limit %s): it is stuck", age.Round(time.Second), liveBound)
		}
		return nil
	}
	// Readiness adds to the API's own rule (a first scan, not stale) the
	// exports: set once the exporter exists.
	var failing atomic.Pointer[func() (int64, string)]
	ready := func() error {
		f := failing.Load()
		if f == nil {
			return nil
		}
		if n, last := (*f)(); n >= config.ReadyExportFailures {
			return fmt.Errorf("the last %d metric exports failed: %s", n, last)
		}
		return nil
	}
	var srv *api.Server
	publish := func(s *agent.Snapshot) {
		hist.Record(s)
		if srv != nil {
			srv.Record(s) // its sampled misses, for /v1/misses
		}
		latest.Store(s)
	}
	if c.APIAddr != "" {
		var err error
		srv, err = api.NewServer(api.Options{Addr: c.APIAddr, Token: c.APIToken, Snapshot: latest.Load, History: hist.Series,
			StaleAfter: 3 * c.Interval, Health: health, Ready: ready})
		if err != nil {
			return err
		}
		if _, err := srv.Listen(); err != nil {
			return err
		}
	}

	if c.Pprof != "" {
		if err := servePprof(c.Pprof, log); err != nil {
			return err
		}
	}

	// Everything the agent takes comes from c, validated once by Resolve.
	cfg := agentConfig(c.Scan)
	cfg.MapInterval = c.MapInterval
	cfg.MapPressure = c.MapPressure && !c.Scan.NoMaps
	cfg.MapRefusals = c.MapRefusals
	cfg.StatsMode, cfg.StatsWindow, cfg.StatsPeriod = c.Stats.Mode, c.Stats.Window, c.Stats.Period
	cfg.Profile, cfg.ProfileWindow, cfg.ProfilePeriod = c.Profile.Selectors, c.Profile.Window, c.Profile.Period
	cfg.OwnerIterator = !c.Scan.NoIterator
	cfg.WatchMisses, cfg.MissBudget = c.MissWatch, c.MissBudget
	a, err := newAgent(cfg)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			a.Close()
		}
	}()
	defer agent.PublishIterators(c.Scan, log).Close()

	pool := nodePool(ctx, c, log)
	exp, err := exporter.New(ctx, exporter.Config{
		Level:           c.Level,
		MaxPrograms:     c.MaxPrograms,
		Interval:        c.EffectiveExportInterval(),
		ScanInterval:    c.Interval, // exports follow scans, in the same wakeup
		ResendUnchanged: c.ResendUnchanged,
		ProgramInfo:     c.ProgramInfo,
		SpanBudget:      c.SpanBudget,
		Kernel:          a.Kernel(),
		ClusterName:     c.ClusterName,
		NodeName:        c.NodeName,
		NodePool:        pool,
		OTel:            c.OTel, // the --otlp-* flags and OTEL_* variables, resolved once
		Console:         c.Console,
		Log:             log,
	})
	if err != nil {
		return err
	}
	// The SDK reports export failures through the global handler; fold them
	// into the exporter's once-per-interval line instead of one line each.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(exp.HandleError))
	exportFailing := exp.ExportFailing
	failing.Store(&exportFailing)

	// Everything is set up: only now say what the agent does, with the
	// settings it really uses.
	log.Info("agent started", append(c.Settings(), "apparmor", a.AppArmor(), "degraded", a.Degraded())...)
	if exp.MetricsTarget == "" && exp.TracesTarget == "" {
		log.Info("no OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT or --otlp-endpoint): not exporting; scanning and the local API go on")
	}

	if c.Calibrate {
		// In the background: scanning starts at once, and the overhead
		// figures join the snapshots when they are ready.
		go func() {
			cal, err := a.Calibrate(ctx, 3*time.Second)
			if err != nil && ctx.Err() == nil {
				log.Warn("calibration incomplete", "err", err)
			}
			n := 0
			for _, c := range cal {
				if c.Supported {
					n++
				}
			}
			var lost []string
			for _, c := range cal {
				if c.Inconclusive {
					lost = append(lost, c.AttachType+": "+c.Reason)
				}
			}
			log.Info("calibrated attach types", "supported", n, "of", len(cal), "lost", lost)
		}()
	} else {
		go statsTaxOnly(ctx, a, log) // the stats tax needs no attached probe
	}

	// The local read-only API serves the latest snapshot; it never blocks
	// or changes the scan loop.
	var apiDone chan error
	if srv != nil {
		log.Info("serving the local API", "addr", srv.Addr().String())
		apiDone = make(chan error, 1)
		go func() { apiDone <- srv.Serve(ctx) }()
	}

	// In a cluster the downward API names the node; the pod informer then
	// names the pods and containers that own programs. Without API access
	// owners keep the container id and pod UID their cgroups name.
	if node := c.NodeName; node != "" && !c.Scan.NoOwners {
		pods, err := kube.NewInCluster(node)
		if err != nil {
			log.Warn("no pod names: the Kubernetes API is not reachable; owners keep container ids and pod UIDs", "err", err)
		} else {
			go pods.Run(ctx)
			switch err := pods.WaitSynced(ctx, 10*time.Second); {
			case kube.Refused(err):
				log.Warn("no pod names: the Kubernetes API refuses the agent's pod list; grant get, list and watch on pods (the chart's rbac.create) and they will appear; owners keep container ids and pod UIDs", "err", err)
			case err != nil:
				log.Warn("pod cache not synced yet; pod names will appear once it is", "err", err)
			}
		}
		a.SetOwnerFiller(pods) // a nil *Pods still fills ids from cgroup paths
	}

	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	said := map[string]bool{} // Degraded lines logged already
	for _, d := range a.Degraded() {
		said[d] = true
	}
	for {
		snap, err := a.Scan(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil:
			// One bad scan is not fatal: count it, say it once, try again.
			exp.ScanFailed(err)
		default:
			exp.Update(context.Background(), snap)
			publish(snap)
			for _, d := range snap.Degraded {
				if !said[d] {
					said[d] = true
					log.Warn("degraded", "what", d)
				}
			}
			if snap.Seq == 1 {
				steady, detail := a.SteadyRead()
				log.Info("scan source", "source", snap.Scan.Source, "fallback_reason", snap.Scan.FallbackReason, "steady_read", steady, "steady_detail", detail)
			}
		}
		exp.LogErrors()
		lastPass.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			if apiDone != nil {
				if err := <-apiDone; err != nil {
					log.Warn("local API", "err", err)
				}
			}
			return shutdownAgent(a, &closed, exp, c.ShutdownTimeout, log)
		case <-tick.C:
		}
	}
}

// nodePoolTimeout bounds the one read of the agent's Node: a server that
// does not answer delays the start by this much, once.
const nodePoolTimeout = 5 * time.Second

// nodePool names the node's pool for the k8s.nodepool.name resource
// attribute from the first of --node-pool-labels its Node carries (one
// read at start: a node does not change pools), unless
// OTEL_RESOURCE_ATTRIBUTES names the attribute (the user's word wins) or
// the agent runs outside Kubernetes (no K8S_NODE_NAME). Whatever fails
// leaves the attribute out with one line; the agent goes on.
func nodePool(ctx context.Context, c config.Agent, log *slog.Logger) string {
	if _, set := c.OTel.ResourceAttributes[config.NodePoolAttr]; set || c.NodeName == "" || len(c.NodePoolLabels) == 0 {
		return ""
	}
	pool, key, err := kube.NodePool(ctx, c.NodeName, c.NodePoolLabels, nodePoolTimeout)
	const set = "; or set " + config.NodePoolAttr + " in OTEL_RESOURCE_ATTRIBUTES"
	switch {
	case kube.Refused(err):
		log.Warn("no node pool: the Kubernetes API refuses the agent's get of its node; grant get on nodes (the chart's rbac.create)"+set, "node", c.NodeName, "err", err)
	case err != nil:
		log.Warn("no node pool: the agent's node could not be read from the Kubernetes API"+set, "node", c.NodeName, "err", err)
	case pool == "":
		log.Info("no node pool: the node has none of the --node-pool-labels; name its pool label there"+set, "node", c.NodeName, "node_pool_labels", c.NodePoolLabels)
	default:
		log.Info("node pool", "pool", pool, "label", key)
	}
	return pool
}

// shutdownAgent ends the open miss episodes (flagged as ended by shutdown),
// releases the stats fd and flushes metrics and spans.
func shutdownAgent(a *agent.Agent, closed *bool, exp *exporter.Exporter, wait time.Duration, log *slog.Logger) error {
	eps := a.Close()
	*closed = true
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	exp.EndEpisodes(ctx, eps)
	err := exp.Shutdown(ctx)
	exp.LogErrors()
	m, t := exp.ExportErrors()
	log.Info("agent stopped", "open_episodes_ended", len(eps), "metric_export_errors", m, "trace_export_errors", t)
	if err != nil {
		// A backend that is down at shutdown is logged, not a failed exit:
		// the agent did what it could.
		log.Warn("final flush incomplete", "err", err)
	}
	return nil
}
