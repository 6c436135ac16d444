package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/spf13/cobra"
)

// missSource yields the misses of one interval: the watcher's state, the
// sampled misses new since the previous call, and (local only) the
// snapshot whose counters say how many misses each program had.
type missSource func(ctx context.Context) (missBatch, error)

type missBatch struct {
	watch  agent.MissWatch
	misses []agent.MissSample
	snap   *agent.Snapshot // nil from a remote agent
}

func init() {
	var c config.Misses
	cmd := &cobra.Command{
		Use:   "misses [PROG...]",
		Short: "Show each recursion miss: its cause, context, task, pod and kernel stack",
		Long: `misses shows why BPF programs miss (docs/misses.md, "Why a program missed"): each miss
the miss watcher sampled, with its cause (recursion, interrupt, preempted,
nested), the context of the run turned away (task, softirq, hardirq, nmi), the
task and pod that were running, and the kernel stack, innermost frame first.
Misses that share a second, program, cause, context, task and stack are shown
once with their count.

On its own it runs a local agent with the watcher armed on the chosen programs
(PROG: an id, a name, or a selector as bpfleet profile takes them: ` + config.ProfileSelectors + `;
none: the programs that miss, each keeping its watchpoints after it goes
quiet until a program with newer misses needs them) and prints one interval,
or every --interval with --watch. The first line says what the watcher
watches and why, or why the kernel refuses it: then each interval's misses
per program are still printed from the kernel's counters, as unexplained; it
is printed again when that changes. With --remote it reads a running agent's
/v1/misses instead (PROG matched against that agent's programs).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			scanFlagsSet(cmd, &c.Scan)
			c.Programs = args
			if err := c.Resolve(config.Env); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var src missSource
			if c.Remote != "" {
				var err error
				if src, err = remoteMisses(ctx, c.Remote, c.Token, c.Programs); err != nil {
					return err
				}
			} else {
				a, err := missAgent(ctx, c)
				if err != nil {
					return err
				}
				defer a.Close()
				src = localMisses(a, len(c.Programs) > 0)
			}
			count := 1
			if c.Watch {
				count = c.Count
			}
			return runMisses(ctx, src, c.Output, cmd.OutOrStdout(), c.Interval, count, c.Remote == "")
		},
	}
	cmd.Flags().BoolVarP(&c.Watch, "watch", "w", false, "print every --interval until interrupted (or --count intervals)")
	cmd.Flags().DurationVarP(&c.Interval, "interval", "i", time.Second, fmt.Sprintf("interval between scans, at least %v", config.MinToolInterval))
	cmd.Flags().IntVarP(&c.Count, "count", "n", 0, "with --watch, stop after this many intervals (0: until interrupted)")
	cmd.Flags().StringVarP(&c.Output, "output", "o", "table", "table, json (indented objects) or jsonl (one per line): records of type watcher (its state, first and on change), miss and interval (counts by cause)")
	cmd.Flags().StringVar(&c.Remote, "remote", "", "read the misses from a bpfleet agent's API at this URL (/v1/misses) instead of watching locally")
	cmd.Flags().StringVar(&c.TokenFile, "token-file", "", "bearer token file for --remote (default $BPFLEET_API_TOKEN)")
	registerScanFlags(cmd, &c.Scan)
	rootCmd.AddCommand(cmd)
}

// missAgent builds the local agent with the watcher armed: on the programs
// PROG... picks (found by its first scan), else on those that miss.
func missAgent(ctx context.Context, c config.Misses) (*watchingAgent, error) {
	cfg := agentConfig(c.Scan)
	cfg.Maps = false // misses need no maps
	cfg.WatchMisses = true
	a, err := newAgent(cfg)
	if err != nil {
		return nil, err
	}
	w := &watchingAgent{Agent: a}
	if len(c.Programs) > 0 {
		s, err := a.Scan(ctx)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("finding the programs to watch: %w", err)
		}
		w.ids = agent.SelectPrograms(c.Programs, s.Programs)
		if len(w.ids) == 0 {
			a.Close()
			return nil, fmt.Errorf("no program matches %s", strings.Join(c.Programs, " "))
		}
		a.NameWatched(w.ids)
	}
	return w, nil
}

// watchingAgent is the local agent and the programs PROG... picked.
type watchingAgent struct {
	*agent.Agent
	ids []uint32
}

// localMisses scans the local agent: each scan's sampled misses are new;
// with PROG... only the chosen programs' are shown (the watcher may watch
// others with episodes in free slots).
func localMisses(a *watchingAgent, chosen bool) missSource {
	return func(ctx context.Context) (missBatch, error) {
		s, err := a.Scan(ctx)
		if err != nil {
			return missBatch{}, err
		}
		b := missBatch{watch: s.MissWatch, misses: s.Misses, snap: s}
		if chosen {
			b.misses = nil
			for _, m := range s.Misses {
				if slices.Contains(a.ids, m.ProgID) {
					b.misses = append(b.misses, m)
				}
			}
			only := *s
			only.Programs = nil
			for _, p := range s.Programs {
				if slices.Contains(a.ids, p.ID) {
					only.Programs = append(only.Programs, p)
				}
			}
			b.snap = &only
		}
		return b, nil
	}
}

// runMisses prints the watcher's state, then each interval's misses, and
// the state again whenever it changes. local: the source scans (its first
// call is the baseline, not printed).
func runMisses(ctx context.Context, src missSource, output string, out io.Writer, every time.Duration, count int, local bool) error {
	first, err := src(ctx)
	if err != nil {
		return err
	}
	var last string
	state := func(w agent.MissWatch) error {
		if k := watchKey(w); k != last {
			last = k
			return printWatch(out, output, w)
		}
		return nil
	}
	if err := state(first.watch); err != nil {
		return err
	}
	if !local {
		// A remote agent's first answer holds its recent misses already.
		if err := printMisses(out, output, first); err != nil {
			return err
		}
		if count == 1 {
			return nil
		}
		if count > 0 {
			count--
		}
	}
	// first is the baseline of the intervals that follow: the source is
	// not asked for it again.
	pending := true
	next := func(ctx context.Context) (missBatch, error) {
		if pending {
			pending = false
			return first, nil
		}
		return src(ctx)
	}
	return everyInterval(ctx, next, every, count, true, func(b missBatch) error {
		if err := state(b.watch); err != nil {
			return err
		}
		return printMisses(out, output, b)
	})
}

// The records of -o json|jsonl, told apart by type: the watcher's state
// (first, and again when it changes), each miss sampled, and each
// interval's misses per program by cause, unexplained included, adding up
// to the kernel's count.
const (
	recordWatcher  = "watcher"
	recordMiss     = "miss"
	recordInterval = "interval"
)

type watcherRecord struct {
	Type string `json:"type"`
	agent.MissWatch
}

type missRecord struct {
	Type string `json:"type"`
	agent.MissSample
}

type intervalRecord struct {
	Type     string           `json:"type"`
	Time     time.Time        `json:"time"`
	ProgID   uint32           `json:"prog_id"`
	ProgName string           `json:"prog_name"`
	Misses   uint64           `json:"misses"`
	Causes   agent.MissCauses `json:"causes"`
}

// watchKey is what of the watcher's state is worth printing again when it
// changes: not its running totals.
func watchKey(w agent.MissWatch) string {
	w.Samples, w.OverBudget, w.Late = 0, 0, 0
	w.Watched = slices.Clone(w.Watched)
	for i := range w.Watched {
		w.Watched[i].Samples = 0
	}
	b, _ := json.Marshal(w)
	return string(b)
}

func printWatch(out io.Writer, output string, w agent.MissWatch) error {
	if output == "table" {
		_, err := fmt.Fprintln(out, watchLine(w))
		return err
	}
	return encoder(out, output).Encode(watcherRecord{Type: recordWatcher, MissWatch: w})
}

func encoder(out io.Writer, output string) *json.Encoder {
	enc := json.NewEncoder(out)
	if output == "json" {
		enc.SetIndent("", "  ")
	}
	return enc
}

// watchLine is the first line: what the watcher watches, or why it cannot.
func watchLine(w agent.MissWatch) string {
	if !w.Available {
		reason := w.Reason
		if reason == "" {
			reason = "not running"
		}
		return fmt.Sprintf("miss watcher unavailable: %s; misses are counted by the kernel but not explained (shown as unexplained)", reason)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "miss watcher: watching %d program(s)", len(w.Watched))
	if w.Slots > 0 {
		fmt.Fprintf(&b, " of %d slot(s)", w.Slots)
	}
	for i, p := range w.Watched {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s #%d (%s since %s)", sep, p.ProgName, p.ProgID, p.Why, p.Since.Local().Format("15:04:05"))
	}
	if len(w.Waiting) > 0 {
		fmt.Fprintf(&b, "; %d waiting for a slot", len(w.Waiting))
	}
	for _, p := range w.Blind {
		fmt.Fprintf(&b, "; %s #%d not watched: %d misses while watched tripped no watchpoint (the kernel counts them where watchpoints do not fire, as in arm64 kprobes)", p.ProgName, p.ProgID, p.Misses)
	}
	fmt.Fprintf(&b, "; budget %d per CPU per interval", w.Budget)
	if w.Symbols != "" {
		fmt.Fprintf(&b, "; symbols: %s", w.Symbols)
	}
	if w.Unseen != "" {
		fmt.Fprintf(&b, "; misses unexplained: %s", w.Unseen)
	}
	return b.String()
}

// printMisses prints one batch: each miss, then the interval's counts per
// program by cause (all unexplained without the watcher); json/jsonl one
// record each, the table grouping the misses of one second that share
// everything but the CPU.
func printMisses(out io.Writer, output string, b missBatch) error {
	switch output {
	case "json", "jsonl":
		enc := encoder(out, output)
		for _, m := range b.misses {
			if err := enc.Encode(missRecord{Type: recordMiss, MissSample: m}); err != nil {
				return fmt.Errorf("writing a miss: %w", err)
			}
		}
		if b.snap == nil {
			return nil
		}
		for _, p := range b.snap.Programs {
			if p.Delta.Misses == 0 {
				continue
			}
			r := intervalRecord{Type: recordInterval, Time: b.snap.Time, ProgID: p.ID, ProgName: p.Name, Misses: p.Delta.Misses, Causes: agent.IntervalCauses(p)}
			if err := enc.Encode(r); err != nil {
				return fmt.Errorf("writing an interval's counts: %w", err)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	groups := groupMisses(b.misses)
	if len(groups) > 0 {
		fmt.Fprintln(tw, "TIME\tCPU\tCONTEXT\tCAUSE\tPROG\tTASK\tPOD\tMISSES")
	}
	for _, g := range groups {
		m := g.m
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s #%d\t%s\t%s\t%d\n", m.Time.Local().Format("15:04:05"), g.cpus, m.Context, m.Cause, m.ProgName, m.ProgID,
			taskName(m), podName(m), g.n)
		if err := tw.Flush(); err != nil { // the stack is not a table row
			return err
		}
		for _, f := range m.Stack {
			fmt.Fprintf(out, "    %s\n", f)
		}
	}
	if b.snap != nil {
		for _, p := range b.snap.Programs {
			if p.Delta.Misses == 0 {
				continue
			}
			c := agent.IntervalCauses(p)
			fmt.Fprintf(tw, "%s\t%s #%d\t%d misses\t%s\n", b.snap.Time.Local().Format("15:04:05"), p.Name, p.ID, p.Delta.Misses, causesText(c))
		}
	}
	return tw.Flush()
}

// causesText spells out a count's causes: "recursion 10, unexplained 2".
func causesText(c agent.MissCauses) string {
	var parts []string
	for _, cause := range agent.Causes {
		if n := c.Get(cause); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", cause, n))
		}
	}
	return strings.Join(parts, ", ")
}

func taskName(m *agent.MissSample) string {
	if m.Comm == "" && m.PID == 0 {
		return "-"
	}
	return fmt.Sprintf("%s[%d]", m.Comm, m.PID)
}

func podName(m *agent.MissSample) string {
	switch {
	case m.PodName != "":
		return m.PodNamespace + "/" + m.PodName
	case m.ContainerID != "":
		return shortID(m.ContainerID)
	}
	return "-"
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// missGroup is the misses of one second that share program, cause,
// context, task, pod and stack; cpus lists their CPUs.
type missGroup struct {
	m    *agent.MissSample
	n    int
	cpus string
}

func groupMisses(ms []agent.MissSample) []missGroup {
	var out []missGroup
	idx := map[string]int{}
	cpuSeen := map[string]map[int]bool{}
	for i := range ms {
		m := &ms[i]
		k := fmt.Sprintf("%d|%d|%s|%s|%d|%d|%s|%s|%s", m.Time.Unix(), m.ProgID, m.Cause, m.Context, m.PID, m.TID, m.ContainerID, m.PodName, strings.Join(m.Stack, ";"))
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, missGroup{m: m})
			cpuSeen[k] = map[int]bool{}
		}
		out[j].n++
		if !cpuSeen[k][m.CPU] {
			cpuSeen[k][m.CPU] = true
			if out[j].cpus != "" {
				out[j].cpus += ","
			}
			out[j].cpus += fmt.Sprint(m.CPU)
		}
	}
	return out
}
