package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

// topRow is one program across the fleet: its name and attach type, which
// agree between nodes and survive reloads.
type topRow struct {
	Program    string  `json:"program"`
	AttachType string  `json:"attach_type"`
	CPU        float64 `json:"cpu"`   // CPUs (run time per second), summed over nodes
	Share      float64 `json:"share"` // of every listed program's CPU
	RunsPerSec float64 `json:"runs_per_sec"`
	NsPerRun   float64 `json:"ns_per_run"` // 0: no runs counted (stats off)
	Misses     float64 `json:"misses"`
	// Causes are the misses by bpf.miss.cause (those with any).
	Causes        map[string]float64 `json:"causes,omitempty"`
	Nodes         int                `json:"nodes"`
	WorstNode     string             `json:"worst_node,omitempty"`
	WorstNsPerRun float64            `json:"worst_ns_per_run,omitempty"`
}

type topDoc struct {
	Since    string   `json:"since"`
	CPU      float64  `json:"cpu"` // every program's, summed
	Programs []topRow `json:"programs"`
}

// topQueries ask CPU and runs per node: shapeTop sums the nodes and
// finds each program's worst node from the same answers, in one round
// (fleetquery.TopCPUByNode says why).
func topQueries(p fq.Params) map[string]string {
	return map[string]string{"cpu": p.TopCPUByNode(), "runs": p.TopRunsByNode(), "misses": p.TopMisses(), "nodes": p.TopNodes()}
}

func shapeTop(c *config.Fleet, ans map[string][]sample, _ time.Time) fleetDoc {
	rows := map[string]*topRow{}
	row := func(l map[string]string) *topRow {
		k := labelKey(l, fq.Program, fq.AttachType)
		r := rows[k]
		if r == nil {
			r = &topRow{Program: l[fq.Program], AttachType: l[fq.AttachType]}
			rows[k] = r
		}
		return r
	}
	doc := &topDoc{Since: c.Since.String()}
	// CPU and runs come per node: summed into the program's row, and the
	// node where one run cost the most (run time over runs) is its worst.
	type nodeKey struct {
		row  *topRow
		node string
	}
	cpuOf := map[nodeKey]float64{}
	for _, s := range ans["cpu"] {
		r := row(s.labels)
		r.CPU += s.value
		doc.CPU += s.value
		cpuOf[nodeKey{r, s.labels[fq.Instance]}] += s.value
	}
	for _, s := range ans["runs"] {
		r := row(s.labels)
		r.RunsPerSec += s.value
		node := s.labels[fq.Instance]
		if s.value <= 0 {
			continue
		}
		ns := cpuOf[nodeKey{r, node}] / s.value * 1e9
		if ns > 0 && (ns > r.WorstNsPerRun || (ns == r.WorstNsPerRun && node < r.WorstNode)) {
			r.WorstNode, r.WorstNsPerRun = node, ns
		}
	}
	for _, s := range ans["misses"] {
		r := row(s.labels)
		r.Misses += s.value
		if s.value > 0 {
			if r.Causes == nil {
				r.Causes = map[string]float64{}
			}
			r.Causes[cmp.Or(s.labels[fq.Cause], "unexplained")] += s.value
		}
	}
	for _, s := range ans["nodes"] {
		row(s.labels).Nodes = int(s.value)
	}
	for _, r := range rows {
		if r.RunsPerSec > 0 {
			r.NsPerRun = r.CPU / r.RunsPerSec * 1e9
		}
		if doc.CPU > 0 {
			r.Share = r.CPU / doc.CPU
		}
	}
	doc.Programs = make([]topRow, 0, len(rows))
	for _, r := range rows {
		doc.Programs = append(doc.Programs, *r)
	}
	slices.SortFunc(doc.Programs, topOrder(c.Sort))
	doc.Programs = limit(doc.Programs, c.Limit)
	return doc
}

// topOrder sorts by --sort, descending but for name, ties by name and
// attach type.
func topOrder(by string) func(a, b topRow) int {
	return func(a, b topRow) int {
		var c int
		switch by {
		case "nsrun":
			c = cmp.Compare(b.NsPerRun, a.NsPerRun)
		case "misses":
			c = cmp.Compare(b.Misses, a.Misses)
		case "nodes":
			c = cmp.Compare(b.Nodes, a.Nodes)
		case "name":
		default:
			c = cmp.Compare(b.CPU, a.CPU)
		}
		return cmp.Or(c, cmp.Compare(a.Program, b.Program), cmp.Compare(a.AttachType, b.AttachType))
	}
}

func (d *topDoc) empty() bool { return len(d.Programs) == 0 }

func (d *topDoc) table(w io.Writer, _ *config.Fleet) {
	fmt.Fprintf(w, "PROGRAM\tATTACH\tCPU\tSHARE\tNS/RUN\tRUNS/S\tMISSES\tCAUSES\tNODES\tWORST NODE\n")
	for _, r := range d.Programs {
		worst := "-"
		if r.WorstNode != "" {
			worst = fmt.Sprintf("%s (%.0f ns)", r.WorstNode, r.WorstNsPerRun)
		}
		fmt.Fprintf(w, "%s\t%s\t%.4f\t%.1f%%\t%s\t%s\t%.0f\t%s\t%d\t%s\n",
			r.Program, orDash(r.AttachType), r.CPU, 100*r.Share, nsOrDash(r.NsPerRun), rateOrDash(r.RunsPerSec),
			r.Misses, causes(r.Causes), r.Nodes, worst)
	}
}

func nsOrDash(ns float64) string {
	if ns == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", ns)
}

func rateOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

// causes is "recursion:3,unexplained:1", the biggest first.
func causes(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	ks := slices.Collect(maps.Keys(m))
	slices.SortFunc(ks, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s:%.0f", k, m[k])
	}
	return strings.Join(parts, ",")
}
