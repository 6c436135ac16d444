package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

// overheadRow is what one attach type adds to a triggered call on the
// nodes of one kernel release and pool, from each agent's calibration.
type overheadRow struct {
	AttachType string  `json:"attach_type"`
	Kernel     string  `json:"kernel"`
	Pool       string  `json:"pool"`
	Nodes      int     `json:"nodes"`
	MedianNs   float64 `json:"median_ns"`
	MinNs      float64 `json:"min_ns"`
	MaxNs      float64 `json:"max_ns"`
	// MaxNode is the node with the highest figure.
	MaxNode string `json:"max_node"`
}

type overheadDoc struct {
	Overhead []overheadRow `json:"overhead"`
}

func overheadQueries(p fq.Params) map[string]string {
	return map[string]string{"overhead": p.OverheadByNode()}
}

func shapeOverhead(c *config.Fleet, ans map[string][]sample, _ time.Time) fleetDoc {
	type group struct {
		row overheadRow
		ns  []float64
	}
	groups := map[string]*group{}
	for _, s := range ans["overhead"] {
		l := s.labels
		k := labelKey(l, fq.AttachType, fq.Kernel, c.Pool)
		g := groups[k]
		if g == nil {
			g = &group{row: overheadRow{AttachType: l[fq.AttachType], Kernel: l[fq.Kernel], Pool: l[c.Pool]}}
			groups[k] = g
		}
		ns := s.value * 1e9
		if len(g.ns) == 0 || ns > g.row.MaxNs || (ns == g.row.MaxNs && l[fq.Instance] < g.row.MaxNode) {
			g.row.MaxNs, g.row.MaxNode = ns, l[fq.Instance]
		}
		g.ns = append(g.ns, ns)
	}
	doc := &overheadDoc{Overhead: []overheadRow{}}
	for _, g := range groups {
		slices.Sort(g.ns)
		g.row.Nodes, g.row.MinNs, g.row.MedianNs = len(g.ns), g.ns[0], medianOf(g.ns)
		doc.Overhead = append(doc.Overhead, g.row)
	}
	slices.SortFunc(doc.Overhead, func(a, b overheadRow) int {
		return cmp.Or(cmp.Compare(a.AttachType, b.AttachType), cmp.Compare(a.Kernel, b.Kernel), cmp.Compare(a.Pool, b.Pool))
	})
	doc.Overhead = limit(doc.Overhead, c.Limit)
	return doc
}

// medianOf sorted vs, as PromQL's quantile(0.5) gives it: the mean of
// the middle two of an even count.
func medianOf(vs []float64) float64 {
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func (d *overheadDoc) empty() bool { return len(d.Overhead) == 0 }

func (d *overheadDoc) table(w io.Writer, _ *config.Fleet) {
	fmt.Fprintf(w, "ATTACH\tKERNEL\tPOOL\tNODES\tMEDIAN NS\tMIN NS\tMAX NS\tMAX NODE\n")
	for _, r := range d.Overhead {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%s\n", r.AttachType, orDash(r.Kernel), orDash(r.Pool), r.Nodes, r.MedianNs, r.MinNs, r.MaxNs, r.MaxNode)
	}
}
