package config

import (
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/internal/apiconst"
)

// Agent is `bpfleet agent`'s configuration.
type Agent struct {
	Scan Scan

	Interval       time.Duration // --interval: between scans
	ExportInterval time.Duration // --export-interval; 0: OTEL_METRIC_EXPORT_INTERVAL, else Interval
	// MapInterval is --map-interval: between reads of the node's maps (a
	// scan reads them sooner when a program came or went); 0: every scan.
	MapInterval time.Duration
	// ResendUnchanged is --resend-unchanged: how often a pushed program
	// or workload counter, memory or map series whose values did not move
	// is sent again; 0: every export.
	ResendUnchanged time.Duration
	// LevelName is --metrics-level as given; Validate parses it into
	// Level, what the exporter takes.
	LevelName   string
	Level       MetricsLevel
	MaxPrograms int
	ProgramInfo bool // --program-info: bpf.program.info at the workload level
	SpanBudget  int  // --span-budget: episode spans per minute; 0: no cap
	// MissWatch is --miss-watch: run the miss watcher (hardware
	// watchpoints on the miss counters of programs that miss), and
	// MissBudget --miss-budget, its samples per CPU per watched program
	// per interval (at least 1).
	MissWatch bool
	// MapPressure is --map-pressure: count each LRU hash map's evictions
	// with the agent's own probe (an fexit program that runs only when an
	// LRU map evicts; docs/maps.md).
	MapPressure bool
	// MapRefusals is --map-refusals: also count each hash-family map's
	// refused updates (an fexit program on every hash update: opt-in).
	MapRefusals bool
	MissBudget  int
	Compression string // --otlp-compression; "": OTEL_EXPORTER_OTLP_COMPRESSION, else gzip
	Console     bool
	ClusterName string // K8S_CLUSTER_NAME or --cluster-name: k8s.cluster.name
	// NodeName is K8S_NODE_NAME (the chart sets it from the downward API):
	// k8s.node.name, and the node whose pods name the owners.
	NodeName string
	// NodePoolLabels is --node-pool-labels: the node labels tried, in
	// order, for the k8s.nodepool.name resource attribute (read from the
	// agent's Node at start unless OTEL_RESOURCE_ATTRIBUTES names it).
	NodePoolLabels  []string
	Calibrate       bool
	ShutdownTimeout time.Duration

	Stats   Stats   // --stats, --stats-window, --stats-period
	Profile Profile // --profile, --profile-window, --profile-period
	Pprof   string  // --pprof: where to serve Go's runtime profiles; "": nowhere

	APIAddr      string
	APITokenFile string
	// APIToken is read by Resolve from APITokenFile or $BPFLEET_API_TOKEN.
	APIToken string

	// OTel is set by Resolve from the flags below and OTEL_* variables.
	OTel OTel
	// OTLPEndpoint and OTLPProtocol are --otlp-endpoint and --otlp-protocol.
	OTLPEndpoint string
	OTLPProtocol string
}

// DefaultMapInterval is how often the agent reads the node's maps. Map
// figures are gauges that move slowly (an alert waits 10 minutes on a
// full map), while the read costs about as much per map as a scan per
// program: at three maps a program, reading them every 30 s rather than
// every 10 s scan keeps the agent within its CPU target.
const DefaultMapInterval = 30 * time.Second

// DefaultResendUnchanged is how often the agent pushes a program or
// workload counter, memory or map series whose values did not move. Most programs on a node
// are idle in any 10 s (a runc device program runs on a device open,
// a cgroup_sock program on a socket's creation), and each series is
// about 200 bytes of attributes that the export encodes and gzips:
// sending the idle ones every 30 s rather than every 10 s takes two
// thirds of that work away, while any 1-minute window (a dashboard's
// rate() at Grafana's minimum $__rate_interval) still holds two points
// of every series.
const DefaultResendUnchanged = 30 * time.Second

// DefaultNodePoolLabels are the node labels that name a node's pool where
// the provider sets one, in the order they are tried: GKE's node pool, an
// EKS managed node group, an AKS agent pool, a Karpenter NodePool. There
// is no Kubernetes-wide label for a pool: a cluster that labels its pools
// itself names its key in --node-pool-labels.
var DefaultNodePoolLabels = []string{
	"cloud.google.com/gke-nodepool",
	"eks.amazonaws.com/nodegroup",
	"kubernetes.azure.com/agentpool",
	"karpenter.sh/nodepool",
}

// labelKey says k is a Kubernetes label key: an optional prefix (a DNS
// subdomain, at most 253 bytes) and a slash, then a name of 1 to 63
// alphanumerics, '-', '_' or '.', beginning and ending alphanumeric.
// (No regexp: this package is in every one-shot command's start.)
func labelKey(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		prefix, name = "", k
	} else if prefix == "" || len(prefix) > 253 || strings.Trim(prefix, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" ||
		!alnum(prefix[0]) || !alnum(prefix[len(prefix)-1]) {
		return false
	}
	if name == "" || len(name) > 63 || !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return false
	}
	for i := range len(name) {
		if c := name[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// NodePoolAttr is the resource attribute naming the node's pool (no
// semantic convention has one; the fleet questions read it as
// k8s_nodepool_name).
const NodePoolAttr = "k8s.nodepool.name"

// DefaultMissBudget is --miss-budget's default: agent.DefaultMissBudget
// (this package is below agent; a test in cmd/bpfleet keeps them equal).
const DefaultMissBudget = 64

// DefaultAgent is the flags' defaults.
func DefaultAgent() Agent {
	return Agent{
		Scan:            DefaultScan(),
		Interval:        10 * time.Second,
		MapInterval:     DefaultMapInterval,
		ResendUnchanged: DefaultResendUnchanged,
		LevelName:       LevelWorkload.String(),
		Level:           LevelWorkload,
		MaxPrograms:     1000,
		SpanBudget:      600,
		MissWatch:       true,
		MapPressure:     true,
		MissBudget:      DefaultMissBudget,
		ClusterName:     os.Getenv("K8S_CLUSTER_NAME"),
		NodeName:        os.Getenv("K8S_NODE_NAME"),
		NodePoolLabels:  slices.Clone(DefaultNodePoolLabels),
		Calibrate:       true,
		ShutdownTimeout: 10 * time.Second,
		Stats:           DefaultStats(),
		Profile:         DefaultProfile(),
		APIAddr:         apiconst.DefaultAddr,
	}
}

// Resolve reads the environment and the token file into c and validates
// the whole: the returned error joins every problem, one line each.
func (c *Agent) Resolve(env Lookup) error {
	var errs []error
	if c.NodeName == "" {
		// DefaultAgent read the process's; env may be another (tests).
		c.NodeName, _ = env("K8S_NODE_NAME")
	}
	if err := c.OTel.resolve(env, c.OTLPEndpoint, c.OTLPProtocol); err != nil {
		errs = append(errs, err)
	}
	// --otlp-compression wins over the environment; the exporter sends
	// what is resolved here.
	if c.Compression == string(CompressionGzip) || c.Compression == string(CompressionNone) {
		c.OTel.Metrics.Compression = Compression(c.Compression)
		c.OTel.Traces.Compression = Compression(c.Compression)
	}
	if err := c.loadToken(env); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Validate())
	return errors.Join(errs...)
}

func (c *Agent) loadToken(env Lookup) error {
	if c.APITokenFile == "" {
		v, _ := env(apiconst.TokenEnv)
		c.APIToken = strings.TrimSpace(v)
		return nil
	}
	b, err := os.ReadFile(c.APITokenFile)
	if err != nil {
		return problem("--api-token-file", c.APITokenFile, "%s: want a readable file holding the API's bearer token", statReason(err))
	}
	c.APIToken = strings.TrimSpace(string(b))
	if c.APIToken == "" {
		return problem("--api-token-file", c.APITokenFile, "the file is empty: want a bearer token of at least %d bytes", MinTokenLen)
	}
	return nil
}

// EffectiveExportInterval is the metric export interval the agent uses:
// --export-interval, else OTEL_METRIC_EXPORT_INTERVAL, else --interval.
func (c *Agent) EffectiveExportInterval() time.Duration {
	switch {
	case c.ExportInterval > 0:
		return c.ExportInterval
	case c.OTel.MetricExportInterval > 0:
		return c.OTel.MetricExportInterval
	}
	return c.Interval
}

// Validate checks every bound and enum, and sets Level from LevelName;
// Resolve calls it.
func (c *Agent) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(c.Scan.Validate())
	if c.Interval < MinScanInterval {
		add(problem("--interval", c.Interval.String(), "want at least %v: a scan of 1,000 programs costs about 4 ms of CPU, so %v keeps the agent under 1%% of a CPU", MinScanInterval, MinScanInterval))
	}
	if c.ExportInterval != 0 && c.ExportInterval < MinExportInterval {
		add(problem("--export-interval", c.ExportInterval.String(), "want at least %v (or 0: OTEL_METRIC_EXPORT_INTERVAL, else --interval); more often only repeats the same data to the collector", MinExportInterval))
	}
	if c.ExportInterval == 0 && c.OTel.MetricExportInterval > 0 && c.OTel.MetricExportInterval < MinExportInterval {
		add(problem("OTEL_METRIC_EXPORT_INTERVAL", strconv.FormatInt(c.OTel.MetricExportInterval.Milliseconds(), 10), "want at least %d (milliseconds); more often only repeats the same data to the collector", MinExportInterval.Milliseconds()))
	}
	if c.MapInterval < 0 {
		add(problem("--map-interval", c.MapInterval.String(), "want 0 (every scan) or a duration"))
	}
	if c.ResendUnchanged < 0 {
		add(problem("--resend-unchanged", c.ResendUnchanged.String(), "want 0 (every series in every export) or a duration"))
	}
	for _, k := range c.NodePoolLabels {
		if !labelKey(k) {
			add(problem("--node-pool-labels", k, "want node label keys, [prefix/]name, comma separated (e.g. cloud.google.com/gke-nodepool)"))
		}
	}
	if l, err := ParseMetricsLevel(c.LevelName); err != nil {
		add(problem("--metrics-level", c.LevelName, levelWant))
	} else {
		c.Level = l
	}
	if c.MaxPrograms < 0 {
		add(problem("--max-programs", strconv.Itoa(c.MaxPrograms), "want 0 (no cap) or a positive number of programs"))
	}
	if c.SpanBudget < 0 {
		add(problem("--span-budget", strconv.Itoa(c.SpanBudget), "want 0 (no cap) or a positive number of spans per minute"))
	}
	add(CheckMissBudget(c.MissBudget))
	if c.Compression != "" && c.Compression != string(CompressionGzip) && c.Compression != string(CompressionNone) {
		add(problem("--otlp-compression", c.Compression, "want gzip or none"))
	}
	if c.ShutdownTimeout <= 0 {
		add(problem("--shutdown-timeout", c.ShutdownTimeout.String(), "want a positive duration for the final flush, e.g. 10s"))
	}
	errs = append(errs, c.Stats.validate()...)
	errs = append(errs, c.Profile.validate("--profile", "--profile-window", "--profile-period")...)
	add(checkPprof(c.Pprof))
	add(c.validateAPI())
	add(c.OTel.Validate())
	return errors.Join(errs...)
}

// validateAPI checks --api-addr and the token: an unauthenticated API on
// the node network would hand every program's identity and owners to
// anyone who can reach the node.
func (c *Agent) validateAPI() error {
	tokenName, tokenValue := "--api-token-file", c.APITokenFile
	if c.APITokenFile == "" {
		tokenName, tokenValue = apiconst.TokenEnv, "<hidden>"
	}
	if c.APIToken != "" && len(c.APIToken) < MinTokenLen {
		return problem(tokenName, tokenValue, "the token is %d bytes: want at least %d (shorter is guessable)", len(c.APIToken), MinTokenLen)
	}
	if c.APIAddr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.APIAddr)
	if err != nil {
		return problem("--api-addr", c.APIAddr, "not host:port: want e.g. 127.0.0.1:9808, or empty to turn the API off")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return problem("--api-addr", c.APIAddr, "port %s: want a number from 0 to 65535", quote(port))
	}
	if host != "" && net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") {
		return problem("--api-addr", c.APIAddr, "host %s: want an IP address or localhost (a name may resolve to other interfaces)", quote(host))
	}
	if !apiconst.IsLoopback(host) && c.APIToken == "" {
		return problem("--api-addr", c.APIAddr, "not loopback and no bearer token: set --api-token-file or %s, or bind 127.0.0.1", apiconst.TokenEnv)
	}
	return nil
}

// Settings are the settings the agent really uses, for its start-up log
// line: key-value pairs for slog.
func (c *Agent) Settings() []any {
	s := []any{
		"interval", c.Interval,
		"export_interval", c.EffectiveExportInterval(),
		"metrics_level", c.Level.String(),
		"max_programs", c.MaxPrograms,
		"span_budget", c.SpanBudget,
		"miss_watch", c.MissWatch,
		"map_pressure", c.MapPressure,
		"map_refusals", c.MapRefusals,
		"miss_budget", c.MissBudget,
		"stats", string(c.Stats.Mode),
	}
	if c.Stats.Mode == StatsSampled {
		s = append(s, "stats_window", c.Stats.Window, "stats_period", c.Stats.Period)
	}
	s = append(s,
		"api", orNone(c.APIAddr),
		"api_auth", c.APIToken != "",
	)
	return append(s, c.OTel.settings()...)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// CheckMissBudget validates --miss-budget: at least 1 sample per CPU per
// watched program per interval (to watch none, --miss-watch=false).
func CheckMissBudget(n int) error {
	if n < 1 {
		return problem("--miss-budget", strconv.Itoa(n), "want at least 1 sample per CPU per watched program per interval (--miss-watch=false turns the watcher off)")
	}
	return nil
}
