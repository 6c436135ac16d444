package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/fleetquery"
)

// `bpfleet fleet` asks the fleet's questions of the metrics store every
// agent exports to (any Prometheus-compatible query API), with the
// queries internal/fleetquery shares with the fleet dashboard. This file
// binds the flags and runs the refreshes; fleetshape.go turns answers
// into rows, fleetrender.go draws them, fleetclient.go asks.

// sample is one element of an instant vector.
type sample struct {
	labels map[string]string
	value  float64
}

// querier asks one instant query at time at, and says which increase
// function the miss questions take on its store (fleetquery.MissIncrease).
type querier interface {
	query(ctx context.Context, q string, at time.Time) ([]sample, error)
	missIncrease(ctx context.Context) (string, error)
}

// fleetQuestion is one subcommand: the queries it asks (by name) and what
// it makes of the answers.
type fleetQuestion struct {
	use, short, long string
	queries          func(p fleetquery.Params) map[string]string
	// then, where set, asks more once the answers are in (queries that
	// the first answers narrow); none: nothing more.
	then func(c *config.Fleet, p fleetquery.Params, ans map[string][]sample) map[string]string
	// shape builds the document from the answers at time now.
	shape func(c *config.Fleet, ans map[string][]sample, now time.Time) fleetDoc
}

// fleetDoc is one refresh's answer: rows to draw as a table and to
// encode as JSON.
type fleetDoc interface {
	empty() bool
	table(w io.Writer, c *config.Fleet)
}

func init() {
	c := &config.Fleet{}
	parent := &cobra.Command{
		Use:   "fleet",
		Short: "Ask the fleet's questions of the metrics store the agents export to",
		Long: `Reads any Prometheus-compatible query API (Prometheus, VictoriaMetrics, a
vmauth or other gateway) that the agents export to over OTLP, and answers
with the queries the fleet dashboard uses: top (programs by CPU), misses
(programs missing, by cause), overhead (attach-type overhead by kernel and
node pool), nodes (agents absent, stalled or degraded).`,
	}
	f := parent.PersistentFlags()
	f.StringVar(&c.Prometheus, "prometheus", "", "base URL of the Prometheus-compatible query API, e.g. http://prometheus:9090 (the part before /api/v1)")
	f.StringVar(&c.TokenFile, "token-file", "", "file holding a bearer token for the query API (default $"+config.FleetTokenEnv+")")
	f.StringVar(&c.CAFile, "ca-file", "", "PEM CA bundle to verify the query API's certificate (https)")
	f.StringVar(&c.CertFile, "cert-file", "", "PEM client certificate for the query API (with --key-file)")
	f.StringVar(&c.KeyFile, "key-file", "", "PEM client key for the query API (with --cert-file)")
	f.BoolVar(&c.Insecure, "insecure-skip-verify", false, "do not verify the query API's certificate (https)")
	f.StringVar(&c.Job, "job", fleetquery.DefaultJob, "regular expression the agents' job label (service.name) matches")
	f.StringVar(&c.Pool, "pool-label", fleetquery.DefaultPoolLabel, "target_info label naming a node's pool (from the k8s.nodepool.name resource attribute by default)")
	f.DurationVar(&c.Since, "since", time.Hour, "how far back to look: rates, misses and last-seen times are over this range")
	f.DurationVar(&c.Window, "window", 5*time.Minute, "an agent with no export in this long is absent; stalled, no stats and no watcher are judged over it; when misses began is found to within --since/120")
	f.DurationVar(&c.Timeout, "timeout", 30*time.Second, "how long one refresh's queries may take")
	f.StringVarP(&c.Output, "output", "o", "table", "output format: table or json")
	f.BoolVarP(&c.Watch, "watch", "w", false, "ask again every --interval")
	f.DurationVarP(&c.Interval, "interval", "i", 10*time.Second, fmt.Sprintf("refresh interval with --watch (at least %v)", config.MinFleetInterval))
	f.IntVarP(&c.Count, "count", "n", 0, "with --watch, stop after this many refreshes (0: until interrupted)")
	f.IntVar(&c.Limit, "limit", 20, "rows to show (0: all)")
	for _, q := range fleetQuestions() {
		cmd := &cobra.Command{Use: q.use, Short: q.short, Long: q.long, Args: noArgs}
		if q.use == "top" {
			cmd.Flags().StringVar(&c.Sort, "sort", "cpu", "order: "+strings.Join(config.FleetSorts, ", "))
		}
		cmd.RunE = func(cmd *cobra.Command, _ []string) error {
			c.IntervalSet, c.CountSet = cmd.Flags().Changed("interval"), cmd.Flags().Changed("count")
			if err := c.Resolve(config.Env); err != nil {
				return err
			}
			return runFleet(cmd.Context(), c, q, cmd.OutOrStdout())
		}
		parent.AddCommand(cmd)
	}
	rootCmd.AddCommand(parent)
}

func fleetQuestions() []fleetQuestion {
	return []fleetQuestion{
		{use: "top", short: "Programs across the fleet by CPU, with ns per run, misses by cause, nodes and the worst node",
			queries: topQueries, shape: shapeTop},
		{use: "misses", short: "Programs missing runs fleet-wide, by cause, with their nodes, kernels, pods and since when",
			queries: missesQueries, then: missesSince, shape: shapeMisses},
		{use: "overhead", short: "What each attach type costs per call, by kernel release and node pool (the agents' calibration)",
			queries: overheadQueries, shape: shapeOverhead},
		{use: "nodes", short: "Agents absent, stalled or degraded (no stats, no watcher, scan errors, dropped programs), with the reason",
			queries: nodesQueries, shape: shapeNodes},
	}
}

// fleetParams are the query parameters of c's flags.
func fleetParams(c *config.Fleet) fleetquery.Params {
	step := c.Since / 120
	if step < time.Second {
		step = time.Second
	}
	return fleetquery.Params{
		Sel:          fleetquery.JobSel(c.Job),
		Range:        promDuration(c.Since),
		RangeSeconds: strconv.FormatFloat(c.Since.Seconds(), 'f', -1, 64),
		Window:       promDuration(c.Window),
		Step:         promDuration(step.Truncate(time.Second)),
		Pool:         c.Pool,
	}
}

// promDuration writes d as PromQL does (whole seconds where it can).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// runFleet asks q once, or every --interval with --watch.
func runFleet(ctx context.Context, c *config.Fleet, q fleetQuestion, out io.Writer) error {
	api, err := newFleetClient(c)
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for n := 1; ; n++ {
		doc, err := askFleet(ctx, c, q, api, time.Now())
		if err != nil {
			if ctx.Err() != nil && c.Watch {
				return nil
			}
			return err
		}
		if err := writeFleetDoc(out, c, doc, c.Watch); err != nil {
			return err
		}
		if !c.Watch || (c.Count > 0 && n >= c.Count) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.Interval):
		}
	}
}

// askFleet runs q's queries concurrently at now and shapes the answers.
// An empty answer is told apart from a store holding no bpfleet series.
func askFleet(ctx context.Context, c *config.Fleet, q fleetQuestion, api querier, now time.Time) (fleetDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	p := fleetParams(c)
	inc, err := api.missIncrease(ctx)
	if err != nil {
		return nil, fleetError(c, err)
	}
	p.MissIncrease = inc
	qs := q.queries(p)
	ans, err := runQueries(ctx, api, qs, now)
	if err != nil {
		return nil, fleetError(c, err)
	}
	if q.then != nil {
		if more := q.then(c, p, ans); len(more) > 0 {
			ans2, err := runQueries(ctx, api, more, now)
			if err != nil {
				return nil, fleetError(c, err)
			}
			maps.Copy(ans, ans2)
		}
	}
	doc := q.shape(c, ans, now)
	if doc.empty() {
		ss, err := api.query(ctx, p.Present(), now)
		if err != nil {
			return nil, fleetError(c, err)
		}
		if len(ss) == 0 || ss[0].value == 0 {
			return nil, fmt.Errorf("%s holds no bpfleet series (no %s with job=~%q in the last %v): check that the agents export to it and --job", c.Prometheus, fleetquery.Scans, c.Job, c.Since)
		}
	}
	return doc, nil
}

// runQueries asks every query at once and waits for all.
func runQueries(ctx context.Context, api querier, qs map[string]string, now time.Time) (map[string][]sample, error) {
	type res struct {
		name string
		ss   []sample
		err  error
	}
	ch := make(chan res, len(qs))
	for name, q := range qs {
		go func() {
			ss, err := api.query(ctx, q, now)
			if err != nil {
				err = fmt.Errorf("%s: %w", name, err)
			}
			ch <- res{name, ss, err}
		}()
	}
	ans := map[string][]sample{}
	var errs []error
	for range qs {
		r := <-ch
		ans[r.name] = r.ss
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return ans, nil
}

// unreachableError is a failure to reach the query API at all (no
// connection, no TLS handshake), as opposed to an answer refusing a query.
type unreachableError struct{ err error }

func (u unreachableError) Error() string { return u.err.Error() }

// fleetError is one line: the backend down, or what it said.
func fleetError(c *config.Fleet, err error) error {
	var u unreachableError
	if errors.As(err, &u) {
		return fmt.Errorf("cannot reach the query API at %s: %v: check --prometheus and that the store is up", c.Prometheus, u.err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the query API at %s did not answer within --timeout %v: %w", c.Prometheus, c.Timeout, err)
	}
	return fmt.Errorf("the query API at %s: %w", c.Prometheus, err)
}

// writeFleetDoc draws doc: a table (with a header line naming the time
// under --watch) or one JSON document per refresh.
func writeFleetDoc(out io.Writer, c *config.Fleet, doc fleetDoc, watch bool) error {
	if c.Output == "json" {
		enc := json.NewEncoder(out)
		if !watch {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(doc)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if watch {
		fmt.Fprintf(w, "-- %s --\n", time.Now().Format(time.TimeOnly))
	}
	doc.table(w, c)
	return w.Flush()
}

// limit is rows[:c.Limit] (all with 0).
func limit[T any](rows []T, n int) []T {
	if n > 0 && len(rows) > n {
		return rows[:n]
	}
	return rows
}

// byKey indexes samples by the values of labels, joined with "\x00".
func byKey(ss []sample, labels ...string) map[string]float64 {
	m := make(map[string]float64, len(ss))
	for _, s := range ss {
		m[labelKey(s.labels, labels...)] = s.value
	}
	return m
}

func labelKey(l map[string]string, labels ...string) string {
	vs := make([]string, len(labels))
	for i, k := range labels {
		vs[i] = l[k]
	}
	return strings.Join(vs, "\x00")
}

// list joins at most n of vs, then "+K".
func list(vs []string, n int) string {
	if len(vs) == 0 {
		return "-"
	}
	if len(vs) <= n {
		return strings.Join(vs, ",")
	}
	return fmt.Sprintf("%s,+%d", strings.Join(vs[:n], ","), len(vs)-n)
}

// ago is how long before now t was, to the second.
func ago(now, t time.Time) string {
	return now.Sub(t).Truncate(time.Second).String() + " ago"
}

// unixTime is a PromQL timestamp (seconds) as a time.
func unixTime(v float64) time.Time {
	return time.UnixMilli(int64(v * 1000)).UTC()
}
