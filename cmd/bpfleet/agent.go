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
)

// agentOptions are `bpfleet agent`'s flags.
type agentOptions struct {
	common       agentFlags
	interval     time.Duration
	level        string
	maxPrograms  int
	console      bool
	endpoint     string
	protocol     string
	clusterName  string
	apiAddr      string
	apiTokenFile string
	calibrate    bool
	shutdownWait time.Duration
}

func init() {
	var o agentOptions
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: scan every interval, export to OpenTelemetry",
		Long: `agent scans the kernel's BPF programs every --interval, holds BPF run-time
stats on while it runs, and exports metrics and miss-episode spans over OTLP.

OTLP is configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_EXPORTER_OTLP_{METRICS,TRACES}_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_METRIC_EXPORT_INTERVAL, OTEL_RESOURCE_ATTRIBUTES,
OTEL_SERVICE_NAME, ...); --otlp-endpoint and --otlp-protocol override them.
With no endpoint the agent says so once and keeps scanning (and serving its
local API). SIGTERM or SIGINT ends open miss episodes and flushes.

With K8S_NODE_NAME set (the chart sets it from the downward API) owners get
pod names from the pods of that node, watched with the pod's ServiceAccount,
or with the kubeconfig $KUBECONFIG names on a host outside any pod.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			return runAgent(ctx, o, log)
		},
	}
	f := cmd.Flags()
	o.common.register(cmd)
	f.DurationVar(&o.interval, "interval", 10*time.Second, "time between scans; also the metric export interval unless OTEL_METRIC_EXPORT_INTERVAL is set")
	f.StringVar(&o.level, "metrics-level", "program", "metrics detail: program, owner or attach-type")
	f.IntVar(&o.maxPrograms, "max-programs", 1000, "most programs exported at --metrics-level=program (0: no cap); the rest are counted in bpf.agent.programs.dropped")
	f.BoolVar(&o.console, "console", false, "also print metrics and spans to stdout")
	f.StringVar(&o.endpoint, "otlp-endpoint", "", "OTLP base URL, e.g. http://collector:4318 (overrides OTEL_EXPORTER_OTLP_ENDPOINT)")
	f.StringVar(&o.protocol, "otlp-protocol", "", "grpc or http/protobuf (overrides OTEL_EXPORTER_OTLP_PROTOCOL)")
	f.StringVar(&o.clusterName, "cluster-name", os.Getenv("K8S_CLUSTER_NAME"), "k8s.cluster.name resource attribute (default $K8S_CLUSTER_NAME)")
	f.StringVar(&o.apiAddr, "api-addr", api.DefaultAddr, "address of the local read-only HTTP API (empty: off); a non-loopback address needs --api-token-file")
	f.StringVar(&o.apiTokenFile, "api-token-file", "", "file holding the bearer token the local API requires")
	f.BoolVar(&o.calibrate, "calibrate", true, "measure each attach type's overhead with the agent's own probes at start (bounded: about half a second of CPU)")
	f.DurationVar(&o.shutdownWait, "shutdown-timeout", 10*time.Second, "how long the final flush may take")
	rootCmd.AddCommand(cmd)
}

func runAgent(ctx context.Context, o agentOptions, log *slog.Logger) error {
	if o.interval <= 0 {
		return fmt.Errorf("--interval must be positive, got %v", o.interval)
	}
	level, err := exporter.ParseLevel(o.level)
	if err != nil {
		return fmt.Errorf("--metrics-level: %w", err)
	}
	if o.maxPrograms < 0 {
		return fmt.Errorf("--max-programs must not be negative, got %d", o.maxPrograms)
	}

	cfg := o.common.config()
	cfg.EnableStats = true
	cfg.OwnerIterator = !o.common.noIter
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

	if o.calibrate {
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
			log.Info("calibrated attach types", "supported", n, "of", len(cal))
		}()
	}

	exp, err := exporter.New(ctx, exporter.Config{
		Level:       level,
		MaxPrograms: o.maxPrograms,
		Interval:    o.interval,
		Kernel:      a.Kernel(),
		ClusterName: o.clusterName,
		Endpoint:    o.endpoint,
		Protocol:    o.protocol,
		Console:     o.console,
		Log:         log,
	})
	if err != nil {
		return err
	}
	// The SDK reports export failures through the global handler; fold them
	// into the exporter's once-per-interval line instead of one line each.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(exp.HandleError))
	if exp.MetricsTarget == "" && exp.TracesTarget == "" {
		log.Info("no OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT or --otlp-endpoint): not exporting; scanning and the local API go on")
	} else {
		log.Info("exporting", "metrics", orNone(exp.MetricsTarget), "traces", orNone(exp.TracesTarget), "level", level.String(), "interval", o.interval)
	}

	// The local read-only API serves the latest snapshot; it never blocks
	// or changes the scan loop.
	var latest atomic.Pointer[agent.Snapshot]
	hist := history.New(history.Capacity(history.Window, o.interval)) // per-program history for /v1/programs/{id}/history
	publish := func(s *agent.Snapshot) { hist.Record(s); latest.Store(s) }
	var apiDone chan error
	if o.apiAddr != "" {
		token, err := api.LoadToken(o.apiTokenFile)
		if err != nil {
			return err
		}
		srv, err := api.NewServer(api.Options{Addr: o.apiAddr, Token: token, Snapshot: latest.Load, History: hist.Series, StaleAfter: 3 * o.interval})
		if err != nil {
			return err
		}
		addr, err := srv.Listen()
		if err != nil {
			return err
		}
		log.Info("serving the local API", "addr", addr.String())
		apiDone = make(chan error, 1)
		go func() { apiDone <- srv.Serve(ctx) }()
	}

	// In a cluster the downward API names the node; the pod informer then
	// names the pods and containers that own programs. Without API access
	// owners keep the container id and pod UID their cgroups name.
	if node := os.Getenv(kube.NodeNameEnv); node != "" && !o.common.noOwners {
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

	tick := time.NewTicker(o.interval)
	defer tick.Stop()
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
		}
		exp.LogErrors()
		select {
		case <-ctx.Done():
			if apiDone != nil {
				if err := <-apiDone; err != nil {
					log.Warn("local API", "err", err)
				}
			}
			return shutdownAgent(a, &closed, exp, o.shutdownWait, log)
		case <-tick.C:
		}
	}
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

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
