package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/spf13/cobra"
)

// listOutput is `bpfleet list -o json`: the programs and the per-attach-type
// summary of one scan, plus the facts a reader needs to trust the numbers.
// A single scan has no interval, so its programs carry no delta; --watch
// output does (listWatchOutput).
type listOutput struct {
	Time        time.Time              `json:"time"`
	Kernel      agent.KernelInfo       `json:"kernel"`
	Stats       agent.StatsState       `json:"stats"`
	Programs    []listProgram          `json:"programs"`
	AttachTypes []agent.AttachTypeStat `json:"attach_types"`
	Scan        agent.ScanStats        `json:"scan"`
	// StatsTax and AgentCPUShare: what watching costs (see agent/internal/stats/statstax.go).
	StatsTax      agent.StatsTax `json:"stats_tax"`
	AgentCPUShare float64        `json:"agent_cpu_share"`
}

// listWatchOutput is one interval of `bpfleet list --watch -o jsonl`.
type listWatchOutput struct {
	Time        time.Time              `json:"time"`
	Interval    time.Duration          `json:"interval_ns"`
	Kernel      agent.KernelInfo       `json:"kernel"`
	Stats       agent.StatsState       `json:"stats"`
	Programs    []listWatchProgram     `json:"programs"`
	AttachTypes []agent.AttachTypeStat `json:"attach_types"`
	Episodes    []agent.Episode        `json:"episodes"`
	Scan        agent.ScanStats        `json:"scan"`

	StatsTax      agent.StatsTax `json:"stats_tax"`
	AgentCPUShare float64        `json:"agent_cpu_share"`
}

// listProgram is a program as list -o json shows it, with its own kernel
// memory (agent.ProgramMemory: memlock, which holds the instructions, and JIT image; its maps
// are `bpfleet maps`').
type listProgram struct {
	agent.Program
	MemoryBytes uint64 `json:"memory_bytes"`
	// MissCauses: recursion_misses by cause where the watcher explained
	// some (the snapshot's; absent: every miss unexplained).
	MissCauses *agent.MissCauses `json:"miss_causes,omitempty"`
}

// listWatchProgram is a program of one --watch interval, with its memory.
type listWatchProgram struct {
	*agent.ProgramStat
	MemoryBytes uint64 `json:"memory_bytes"`
}

func newListOutput(s *agent.Snapshot, watch bool) any {
	if watch {
		progs := make([]listWatchProgram, len(s.Programs))
		for i, p := range s.Programs {
			progs[i] = listWatchProgram{p, agent.ProgramMemory(&p.Program)}
		}
		return listWatchOutput{Time: s.Time, Interval: s.Interval, Kernel: s.Kernel, Stats: s.Stats, Programs: progs,
			AttachTypes: s.AttachTypes, Episodes: s.Episodes, Scan: s.Scan, StatsTax: s.StatsTax, AgentCPUShare: s.AgentCPUShare}
	}
	progs := make([]listProgram, len(s.Programs))
	for i := range s.Programs {
		progs[i] = listProgram{s.Programs[i].Program, agent.ProgramMemory(&s.Programs[i].Program), s.Programs[i].MissCauses}
	}
	return listOutput{Time: s.Time, Kernel: s.Kernel, Stats: s.Stats, Programs: progs, AttachTypes: s.AttachTypes, Scan: s.Scan,
		StatsTax: s.StatsTax, AgentCPUShare: s.AgentCPUShare}
}

func init() {
	var c config.List
	var tax bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every BPF program on this node with its cost, misses, links and owners",
		Long: `list scans the kernel once and prints every BPF program: attach type and
target (from its links), run count, run time, recursion misses, kprobe link
misses, and the processes holding it.

With --watch it keeps scanning and prints one JSON object per interval
(-o jsonl), with per-interval deltas and rates: a headless bpftop for
scripts and log pipelines.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			output, err := resolveList(cmd, &c, c.Validate)
			if err != nil {
				return err
			}
			pretty = c.Pretty
			if !c.Watch {
				if output == "json" {
					go warmJSON(c.Pretty)
				}
				// One scan lives for milliseconds and allocates a few MB:
				// collecting that garbage costs more than it frees. The
				// limit still bounds a node with a huge number of programs.
				debug.SetGCPercent(-1)
				debug.SetMemoryLimit(256 << 20)
			}
			cfg := agentConfig(c.Scan)
			if c.Watch { // a single scan shows counters as they are
				cfg.StatsMode = agent.StatsAlways
			}
			cfg.Parallel = runtime.NumCPU()
			cfg.OneShot = !c.Watch
			// list shows programs (their own memory included): reading
			// every map would only slow the one-shot scan.
			cfg.Maps = false
			a, err := newAgent(cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			ctx := cmd.Context()
			if c.Watch || tax {
				// Only a run that lasts ends on a signal through Close. A
				// single scan takes milliseconds and holds nothing the
				// kernel does not release at exit, and the handler would
				// cost it ~0.3 ms: a goroutine (and a thread) at start,
				// and signal.Stop waiting for it to idle at the end.
				var stop context.CancelFunc
				ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
				defer stop()
			}
			if tax {
				measureTax(ctx, a, cmd.ErrOrStderr())
			}
			out := cmd.OutOrStdout()
			if !c.Watch {
				s, err := a.Scan(ctx)
				if err != nil {
					return err
				}
				if err := printList(out, output, s); err != nil {
					return err
				}
				warmCacheAfter(cfg.CacheDir)
				return nil
			}
			return watchList(ctx, a, out, output, c.Interval, c.Count)
		},
	}
	registerListFlags(cmd, &c, "scanning", "scan", " (deltas and rates)")
	cmd.Flags().BoolVar(&tax, "stats-tax", false, "first measure what BPF run-time stats cost per run here (about a second), then show the stats tax: with one scan from runs since each program's load")
	rootCmd.AddCommand(cmd)
}

// registerListFlags binds the flags list and maps share: the scan's, the
// output and --watch with its interval and count (verb, what: how the help
// names a repeated read).
func registerListFlags(cmd *cobra.Command, c *config.List, verb, what, shows string) {
	registerScanFlags(cmd, &c.Scan)
	f := cmd.Flags()
	f.StringVarP(&c.Output, "output", "o", "table", "output format: table, json or jsonl")
	f.BoolVarP(&c.Pretty, "pretty", "p", false, "indent -o json output")
	f.BoolVarP(&c.Watch, "watch", "w", false, "keep "+verb+" and print every interval"+shows)
	f.DurationVarP(&c.Interval, "interval", "i", time.Second, fmt.Sprintf("%s interval with --watch (at least %v)", what, config.MinToolInterval))
	f.IntVarP(&c.Count, "count", "n", 0, "with --watch, stop after this many intervals (0: until interrupted)")
}

// resolveList notes which of those flags were given, runs validate (the
// command's whole check) and returns the output: jsonl where --watch is
// asked for json, one object per interval.
func resolveList(cmd *cobra.Command, c *config.List, validate func() error) (string, error) {
	scanFlagsSet(cmd, &c.Scan)
	c.IntervalSet, c.CountSet = cmd.Flags().Changed("interval"), cmd.Flags().Changed("count")
	if err := validate(); err != nil {
		return "", err
	}
	if c.Watch && c.Output == "json" {
		return "jsonl", nil
	}
	return c.Output, nil
}

func watchList(ctx context.Context, a *agent.Agent, out io.Writer, output string, every time.Duration, count int) error {
	return everyInterval(ctx, a.Scan, every, count, true, func(s *agent.Snapshot) error { return printList(out, output, s) })
}

// everyInterval hands fn what src gives once per tick (a snapshot, the
// misses' batch), count times (0: until ctx ends). With baseline, src is
// first called once and that not shown (the first delta needs one);
// without (maps have no deltas), the first is shown at once.
func everyInterval[T any](ctx context.Context, src func(context.Context) (T, error), every time.Duration, count int, baseline bool, fn func(T) error) error {
	if baseline {
		if _, err := src(ctx); err != nil {
			return err
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; count == 0 || n < count; n++ {
		if baseline || n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		s, err := src(ctx)
		if err != nil {
			return err
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// warmJSON builds encoding/json's encoders for every type list -o json
// encodes by reflection, on the other CPU while the scan runs: their
// first use costs a one-shot list ~0.3 ms on its critical path otherwise.
// The encoder cache is safe for concurrent use. Compact output is written
// by writeListJSON, which encodes programs by hand: only the other parts
// go through encoding/json, and Program's encoder, the largest, is not
// built.
func warmJSON(pretty bool) {
	if pretty {
		_, _ = json.Marshal(listOutput{Programs: []listProgram{{Program: agent.Program{Links: []agent.Link{{}}, Owners: []agent.Owner{{}}}}},
			AttachTypes: []agent.AttachTypeStat{{}}})
		return
	}
	_, _ = json.Marshal(struct {
		Kernel      agent.KernelInfo
		Stats       agent.StatsState
		AttachTypes []agent.AttachTypeStat
		Scan        agent.ScanStats
		StatsTax    agent.StatsTax
		Links       []agent.Link
		Owners      []agent.Owner
	}{AttachTypes: []agent.AttachTypeStat{{}}, Links: []agent.Link{{}}, Owners: []agent.Owner{{}}})
}

// pretty indents -o json (compact by default, like bpftool -j).
var pretty bool

func printList(w io.Writer, output string, s *agent.Snapshot) error {
	switch output {
	case "json", "jsonl":
		if s.Interval == 0 && !pretty {
			return writeListJSON(w, s)
		}
		v := newListOutput(s, s.Interval > 0)
		enc := json.NewEncoder(w)
		if pretty && output == "json" {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(v)
	}
	return printTable(w, s)
}

func printTable(w io.Writer, s *agent.Snapshot) error {
	progs := append([]*agent.ProgramStat(nil), s.Programs...)
	sort.Slice(progs, func(i, j int) bool { return progs[i].ID < progs[j].ID })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tATTACH\tTARGET\tRUNS\tRUN TIME\tNS/RUN\tMISSES\tMEM\tOWNER\tNAME")
	for i := range progs {
		p := progs[i]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Type, p.AttachType, trunc(p.AttachTarget, 32),
			p.RunCount, time.Duration(p.RunTimeNs).Round(time.Microsecond), nsPerRun(p.RunTimeNs, p.RunCount),
			missesCell(p), fmtBytes(agent.ProgramMemory(&p.Program)), ownerCell(p.Owners), p.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTACH TYPE\tPROGRAMS\tRUNS\tRUN TIME\tNS/RUN\tRECURSION MISSES\tLINK MISSED")
	for _, a := range s.AttachTypes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%d\n", a.AttachType, a.Programs, a.RunCount,
			time.Duration(a.RunTimeNs).Round(time.Microsecond), nsPerRun(a.RunTimeNs, a.RunCount), countCell(a.RecursionMisses), a.LinkMissed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range progs {
		if p.MissCauses != nil && agent.Explained(*p.MissCauses) {
			fmt.Fprintf(w, "\nMISSES (causes): %s; the rest unexplained (bpfleet misses PROG shows them)\n", agent.ShortCausesLegend())
			break
		}
	}
	fmt.Fprintf(w, "\n%d programs, %d links; %s\n", s.Scan.Programs, s.Scan.Links, statsLine(s.Stats))
	fmt.Fprintf(w, "%s; %s\n", taxLine(s), agentCPULine(s))
	return nil
}

func statsLine(st agent.StatsState) string {
	switch {
	case st.HeldByAgent:
		return "run-time stats on (held by bpfleet)"
	case st.Sysctl > 0:
		return "run-time stats on (kernel.bpf_stats_enabled=1)"
	case st.Error != "":
		return "run-time stats unavailable: " + st.Error
	}
	return "run-time stats may be off: run counts and run time only grow while a tool holds BPF_ENABLE_STATS or kernel.bpf_stats_enabled=1 (bpfleet agent and list --watch hold it)"
}

func nsPerRun(ns, runs uint64) string {
	if runs == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(ns)/float64(runs), 'f', 1, 64)
}

// missesCell is the MISSES column: recursion misses, with their explained
// causes where the watcher measured some ("12 (r10 p2)": recursion 10,
// preempted 2, the rest unexplained), and kprobe link misses.
func missesCell(p *agent.ProgramStat) string {
	parts := []string{countCell(p.RecursionMisses)}
	if p.RecursionMisses != nil {
		if c := agent.ShortCauses(agent.ProgramCauses(p)); c != "" {
			parts = append(parts, "("+c+")")
		}
	}
	for _, l := range p.Links {
		if l.Missed != nil && *l.Missed > 0 {
			parts = append(parts, "link "+strconv.FormatUint(*l.Missed, 10))
		}
	}
	return strings.Join(parts, " ")
}

// countCell is a counter the kernel may lack: n/a where it is absent
// (nil), never a 0 it did not count.
func countCell(n *uint64) string {
	if n == nil {
		return "n/a"
	}
	return strconv.FormatUint(*n, 10)
}

func ownerCell(owners []agent.Owner) string {
	if len(owners) == 0 {
		return "-"
	}
	o := owners[0]
	s := o.Comm + "(" + strconv.Itoa(o.PID) + ")"
	if o.PodName != "" {
		s += " " + o.PodNamespace + "/" + o.PodName
	} else if o.ContainerID != "" {
		s += " " + trunc(o.ContainerID, 12)
	}
	if len(owners) > 1 {
		s += " +" + strconv.Itoa(len(owners)-1)
	}
	return s
}

func trunc(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
