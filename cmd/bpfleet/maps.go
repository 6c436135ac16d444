package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/mapview"
	"github.com/bpfleet/bpfleet/internal/config"
)

func init() {
	var c config.Maps
	cmd := &cobra.Command{
		Use:   "maps",
		Short: "List every BPF map on this node with its memory, fullness and the programs that use it",
		Long: `maps reads every BPF map on the node once and prints its id, name, type,
max entries, entries and fullness (the hash family, on kernels with
bpf_map_sum_elem_count: 6.6 and later), its memory (the kernel's own figure,
fdinfo's memlock) and the programs that use it with their owners.

It opens no map fd where the kernel has the bpf_map iterator, and never
keeps one: another tool's maps are freed as soon as it lets them go.

With --watch it keeps reading and prints one JSON object per interval
(-o jsonl).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			output, err := resolveList(cmd, &c.List, c.Validate)
			if err != nil {
				return err
			}
			cfg := agentConfig(c.Scan)
			cfg.Maps = true
			cfg.NoPins = true // the maps view shows no pins
			cfg.OneShot = !c.Watch
			// Evictions count from the probe's attach: only a watch
			// sees any.
			cfg.MapPressure, cfg.MapRefusals = c.Watch, c.Watch && c.Refusals
			cfg.Parallel = runtime.NumCPU()
			a, err := newAgent(cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			f := mapview.Filter{Type: c.Type, ProgID: uint32(c.Prog), Sort: c.Sort}
			out := cmd.OutOrStdout()
			show := func(s *agent.Snapshot) error {
				if s.MapScan.Error != "" {
					return fmt.Errorf("%s", s.MapScan.Error)
				}
				return printMaps(out, output, c.Pretty && !c.Watch, mapview.Build(s, f))
			}
			ctx := cmd.Context()
			if !c.Watch {
				s, err := a.Scan(ctx)
				if err != nil {
					return err
				}
				return show(s)
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return everyInterval(ctx, a.Scan, c.Interval, c.Count, false, show)
		},
	}
	registerListFlags(cmd, &c.List, "reading", "read", "")
	f := cmd.Flags()
	f.StringVarP(&c.Sort, "sort", "s", "memory", "order: "+strings.Join(config.MapSorts, ", ")+" (all but id and name descending)")
	f.StringVarP(&c.Type, "type", "t", "", "only maps of this type (as bpftool names it: hash, array, ringbuf, ...)")
	f.Int64Var(&c.Prog, "prog", 0, "only the maps this program id uses")
	f.BoolVar(&c.Refusals, "refusals", false, "with --watch, also count each hash map's refused updates (E2BIG, ENOMEM) with an fexit program on every hash map update of the node while it runs")
	rootCmd.AddCommand(cmd)
}

func printMaps(w io.Writer, output string, pretty bool, l mapview.List) error {
	if output == "table" {
		return printMapsTable(w, &l)
	}
	enc := json.NewEncoder(w)
	if pretty {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(l)
}

func printMapsTable(w io.Writer, l *mapview.List) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTYPE\tMAX ENTRIES\tENTRIES\tFULL\tEVICTED\tREFUSED\tMEMORY\tUSERS")
	unknown, reason := 0, ""
	for i := range l.Maps {
		m := &l.Maps[i]
		entries := "-"
		switch {
		case m.Entries != nil:
			entries = strconv.FormatUint(*m.Entries, 10)
		case m.HashFamily():
			entries, unknown, reason = "?", unknown+1, m.EntriesReason
		}
		mem := "?"
		if m.MemoryBytes != nil {
			mem = fmtBytes(*m.MemoryBytes)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.Type, m.MaxEntries, entries,
			fullBar(m.Fullness, 10, false), pressureCell(&m.Map, m.Evictions, m.EvictionsPerSecond, m.Type == "lru_hash" || m.Type == "lru_percpu_hash"),
			pressureCell(&m.Map, m.RefusedUpdates, m.RefusedUpdatesPerSecond, m.HashFamily()), mem, usersCell(m.Users))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d maps of %d, %s in all (the kernel's figure, each map once); %s\n", len(l.Maps), l.Total, fmtBytes(l.MemoryBytes), mapScanLine(l.Scan))
	if unknown > 0 {
		fmt.Fprintf(w, "entries unknown for %d hash maps: %s\n", unknown, reason)
	}
	for _, l := range pressureLines(l.Scan) {
		fmt.Fprintln(w, l)
	}
	return nil
}

// pressureCell is a map's evictions or refused updates (n) and their rate:
// "-" where the map's type has none, "?" where they are not counted.
func pressureCell(m *agent.Map, n *uint64, rate *float64, applies bool) string {
	switch {
	case n == nil && applies:
		return "?"
	case n == nil:
		return "-"
	}
	s := strconv.FormatUint(*n, 10)
	if m.PressureSinceStart {
		s += "+" // the map is older than the count
	}
	if rate != nil {
		s += " (" + strconv.FormatFloat(*rate, 'f', 1, 64) + "/s)"
	}
	return s
}

// pressureLines say since when evictions and refused updates are
// counted, and why one is not.
func pressureLines(s agent.MapScan) []string {
	var out []string
	if !s.PressureSince.IsZero() {
		out = append(out, "evictions and refused updates counted since "+s.PressureSince.Format(time.RFC3339)+" (+: the map is older, its earlier counts unknown)")
	}
	if s.EvictionsReason != "" {
		out = append(out, "evictions not counted: "+s.EvictionsReason)
	}
	if s.RefusedReason != "" {
		out = append(out, "refused updates not counted: "+s.RefusedReason)
	}
	return out
}

// mapScanLine says how the maps were read.
func mapScanLine(s agent.MapScan) string {
	l := "read by " + s.Source
	if s.FallbackReason != "" {
		l += " (" + s.FallbackReason + ")"
	}
	return l
}

// usersCell names a map's first user and its first owner, and how many
// more users there are.
func usersCell(users []mapview.User) string {
	if len(users) == 0 {
		return "-"
	}
	u := users[0]
	s := u.ProgName + "(" + strconv.FormatUint(uint64(u.ProgID), 10) + ")"
	if len(u.Owners) > 0 {
		o := u.Owners[0]
		s += " " + o.Comm + "(" + strconv.Itoa(o.PID) + ")"
		if o.PodName != "" {
			s += " " + o.PodNamespace + "/" + o.PodName
		}
	}
	if len(users) > 1 {
		s += " +" + strconv.Itoa(len(users)-1)
	}
	return s
}

// fmtBytes writes n in binary units, three significant digits at most.
func fmtBytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, unit := float64(n), 0
	for v >= 1024 && unit < 5 {
		v /= 1024
		unit++
	}
	prec := 1
	if v >= 100 {
		prec = 0
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + [...]string{"", "KiB", "MiB", "GiB", "TiB", "PiB"}[unit]
}

// fullBar draws a fullness as width cells and a percentage ("-" without
// one); above 1 (an LRU map the kernel let overshoot) it is drawn full.
func fullBar(f *float64, width int, ascii bool) string {
	if f == nil {
		return "-"
	}
	on, off := "█", "░"
	if ascii {
		on, off = "#", "."
	}
	n := min(max(int(*f*float64(width)+0.5), 0), width)
	if *f > 0 && n == 0 {
		n = 1 // a map with an element shows one
	}
	return strings.Repeat(on, n) + strings.Repeat(off, width-n) + " " + strconv.FormatFloat(*f*100, 'f', 0, 64) + "%"
}
