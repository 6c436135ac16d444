package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

// Agent states `fleet nodes` reports; an agent in none is ok.
const (
	nodeAbsent   = "absent"   // no export in --window, and no final export
	nodeLeft     = "left"     // its last export was its final one (SIGTERM)
	nodeStalled  = "stalled"  // exporting, but its scans did not grow
	nodeDegraded = "degraded" // scanning, but blind to something
)

type nodeRow struct {
	Node     string    `json:"node"`
	Job      string    `json:"job"`
	State    string    `json:"state"`
	Reasons  []string  `json:"reasons"`
	LastSeen time.Time `json:"last_seen"`
}

type nodesDoc struct {
	Since string `json:"since"`
	// Agents is every agent seen in the range; the rest count them by
	// state.
	Agents   int       `json:"agents"`
	OK       int       `json:"ok"`
	Absent   int       `json:"absent"`
	Left     int       `json:"left"`
	Stalled  int       `json:"stalled"`
	Degraded int       `json:"degraded"`
	Nodes    []nodeRow `json:"nodes"` // every agent not ok
}

func nodesQueries(p fq.Params) map[string]string {
	return map[string]string{
		"seen": p.LastSeen(), "scans": p.ScansGrowth(), "shutdown": p.ShutdownLast(),
		"stats": p.StatsOff(), "watcher": p.WatcherOff(), "errors": p.ScanErrorsGrowth(), "dropped": p.DroppedNow(),
	}
}

func shapeNodes(c *config.Fleet, ans map[string][]sample, now time.Time) fleetDoc {
	keys := []string{fq.Job, fq.Instance}
	scans := byKey(ans["scans"], keys...)
	shutdown := byKey(ans["shutdown"], keys...)
	stats := byKey(ans["stats"], keys...)
	watcher := byKey(ans["watcher"], keys...)
	errs := byKey(ans["errors"], keys...)
	dropped := byKey(ans["dropped"], keys...)
	window := c.Window.String()
	doc := &nodesDoc{Since: c.Since.String(), Nodes: []nodeRow{}}
	for _, s := range ans["seen"] {
		k := labelKey(s.labels, keys...)
		r := nodeRow{Node: s.labels[fq.Instance], Job: s.labels[fq.Job], LastSeen: unixTime(s.value)}
		doc.Agents++
		switch {
		case now.Sub(r.LastSeen) > c.Window && shutdown[k] == 1:
			r.State = nodeLeft
			r.Reasons = append(r.Reasons, fmt.Sprintf("final export at shutdown (SIGTERM) %s", ago(now, r.LastSeen)))
			doc.Left++
		case now.Sub(r.LastSeen) > c.Window:
			r.State = nodeAbsent
			r.Reasons = append(r.Reasons, fmt.Sprintf("no export for %s (over --window %s)", now.Sub(r.LastSeen).Truncate(time.Second), window))
			doc.Absent++
		default:
			if n, ok := scans[k]; ok && n == 0 {
				r.State = nodeStalled
				r.Reasons = append(r.Reasons, fmt.Sprintf("exporting, but no scan completed in %s", window))
			}
			if _, ok := stats[k]; ok {
				r.Reasons = append(r.Reasons, "no stats: BPF run-time stats off against its --stats mode (run counts and CPU not measured)")
			}
			if _, ok := watcher[k]; ok {
				r.Reasons = append(r.Reasons, "no watcher: the miss watcher is off or refused (every miss unexplained)")
			}
			if n, ok := errs[k]; ok {
				r.Reasons = append(r.Reasons, fmt.Sprintf("scan errors: %.0f in %s", n, window))
			}
			if n, ok := dropped[k]; ok {
				r.Reasons = append(r.Reasons, fmt.Sprintf("dropped: %.0f programs left out of its export (--max-programs)", n))
			}
			switch {
			case r.State == nodeStalled:
				doc.Stalled++
			case len(r.Reasons) > 0:
				r.State = nodeDegraded
				doc.Degraded++
			default:
				doc.OK++
				continue
			}
		}
		doc.Nodes = append(doc.Nodes, r)
	}
	order := map[string]int{nodeAbsent: 0, nodeStalled: 1, nodeDegraded: 2, nodeLeft: 3}
	slices.SortFunc(doc.Nodes, func(a, b nodeRow) int {
		return cmp.Or(cmp.Compare(order[a.State], order[b.State]), cmp.Compare(a.Node, b.Node), cmp.Compare(a.Job, b.Job))
	})
	doc.Nodes = limit(doc.Nodes, c.Limit)
	return doc
}

func (d *nodesDoc) empty() bool { return d.Agents == 0 }

func (d *nodesDoc) table(w io.Writer, _ *config.Fleet) {
	fmt.Fprintf(w, "%d agents in the last %s: %d ok, %d absent, %d stalled, %d degraded, %d left\n", d.Agents, d.Since, d.OK, d.Absent, d.Stalled, d.Degraded, d.Left)
	if len(d.Nodes) == 0 {
		return
	}
	fmt.Fprintf(w, "NODE\tSTATE\tLAST SEEN\tREASON\n")
	for _, r := range d.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Node, r.State, r.LastSeen.Local().Format(time.DateTime), strings.Join(r.Reasons, "; "))
	}
}
