package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

// missRow is one program and cause missing across the fleet.
type missRow struct {
	Program    string    `json:"program"`
	AttachType string    `json:"attach_type"`
	Cause      string    `json:"cause"`
	Misses     float64   `json:"misses"`
	Since      time.Time `json:"since,omitzero"` // the earliest node's
	Nodes      []missAt  `json:"nodes"`
	Kernels    []string  `json:"kernels"`
	// Pods are the pods (program level) or else workloads
	// (namespace/kind/name) whose programs missed.
	Pods []string `json:"pods"`
}

// missAt is one node where a program missed.
type missAt struct {
	Node   string    `json:"node"`
	Kernel string    `json:"kernel,omitempty"`
	Pool   string    `json:"pool,omitempty"`
	Misses float64   `json:"misses"`
	Since  time.Time `json:"since,omitzero"`
}

type missDoc struct {
	Since  string    `json:"since"`
	Misses []missRow `json:"misses"`
}

func missesQueries(p fq.Params) map[string]string {
	return map[string]string{"misses": p.MissesByNode()}
}

// missesSince asks, once the programs that missed and their nodes are
// known, when they began to and the nodes' kernels and pools (nothing
// when none missed).
func missesSince(_ *config.Fleet, p fq.Params, ans map[string][]sample) map[string]string {
	progs, nodes := map[string]bool{}, map[string]bool{}
	for _, s := range ans["misses"] {
		progs[s.labels[fq.Program]] = true
		nodes[s.labels[fq.Instance]] = true
	}
	if len(progs) == 0 {
		return nil
	}
	// The nodes narrow the node facts only while they are few: the regex
	// is in NodeInfo four times, and 500 nodes made it 31 KB, past
	// VictoriaMetrics' 16 KB -search.maxQueryLen (refused). Every node's
	// facts are one series each, 51 ms at 1,000 nodes (docs/performance.md).
	var facts []string
	if len(nodes) <= maxNarrowNodes {
		facts = slices.Sorted(maps.Keys(nodes))
	}
	return map[string]string{"since": p.MissesSince(slices.Sorted(maps.Keys(progs))...), "nodes": p.NodeInfo(facts...)}
}

// maxNarrowNodes is the most nodes a query names (a regex of their
// instances); more, and it asks every node.
const maxNarrowNodes = 100

// nodeFacts is each node's kernel and pool from NodeInfo.
func nodeFacts(ss []sample, pool string) map[string][2]string {
	m := map[string][2]string{}
	for _, s := range ss {
		m[s.labels[fq.Instance]] = [2]string{s.labels[fq.Kernel], s.labels[pool]}
	}
	return m
}

func shapeMisses(c *config.Fleet, ans map[string][]sample, _ time.Time) fleetDoc {
	facts := nodeFacts(ans["nodes"], c.Pool)
	since := byKey(ans["since"], fq.Instance, fq.Program, fq.AttachType, fq.Cause)
	rows := map[string]*missRow{}
	type at struct{ row, node string }
	nodes := map[at]*missAt{}
	pods := map[string]map[string]bool{}
	for _, s := range ans["misses"] {
		l := s.labels
		cause := cmp.Or(l[fq.Cause], "unexplained")
		k := labelKey(map[string]string{"p": l[fq.Program], "a": l[fq.AttachType], "c": cause}, "p", "a", "c")
		r := rows[k]
		if r == nil {
			r = &missRow{Program: l[fq.Program], AttachType: l[fq.AttachType], Cause: cause}
			rows[k] = r
			pods[k] = map[string]bool{}
		}
		r.Misses += s.value
		n := nodes[at{k, l[fq.Instance]}]
		if n == nil {
			f := facts[l[fq.Instance]]
			n = &missAt{Node: l[fq.Instance], Kernel: f[0], Pool: f[1]}
			if t, ok := since[labelKey(l, fq.Instance, fq.Program, fq.AttachType, fq.Cause)]; ok {
				n.Since = unixTime(t)
			}
			nodes[at{k, l[fq.Instance]}] = n
			r.Nodes = append(r.Nodes, *n)
		}
		n.Misses += s.value
		switch {
		case l[fq.Pod] != "":
			pods[k][l[fq.Namespace]+"/"+l[fq.Pod]] = true
		case l[fq.WlName] != "":
			pods[k][l[fq.Namespace]+"/"+l[fq.WlKind]+"/"+l[fq.WlName]] = true
		}
	}
	doc := &missDoc{Since: c.Since.String(), Misses: []missRow{}}
	for k, r := range rows {
		kernels := map[string]bool{}
		for i := range r.Nodes {
			n := nodes[at{k, r.Nodes[i].Node}]
			r.Nodes[i] = *n
			if n.Kernel != "" {
				kernels[n.Kernel] = true
			}
			if !n.Since.IsZero() && (r.Since.IsZero() || n.Since.Before(r.Since)) {
				r.Since = n.Since
			}
		}
		slices.SortFunc(r.Nodes, func(a, b missAt) int { return cmp.Or(cmp.Compare(b.Misses, a.Misses), cmp.Compare(a.Node, b.Node)) })
		r.Kernels = slices.Sorted(maps.Keys(kernels))
		r.Pods = slices.Sorted(maps.Keys(pods[k]))
		doc.Misses = append(doc.Misses, *r)
	}
	slices.SortFunc(doc.Misses, func(a, b missRow) int {
		return cmp.Or(cmp.Compare(b.Misses, a.Misses), cmp.Compare(a.Program, b.Program), cmp.Compare(a.AttachType, b.AttachType), cmp.Compare(a.Cause, b.Cause))
	})
	doc.Misses = limit(doc.Misses, c.Limit)
	return doc
}

func (d *missDoc) empty() bool { return len(d.Misses) == 0 }

func (d *missDoc) table(w io.Writer, _ *config.Fleet) {
	fmt.Fprintf(w, "PROGRAM\tATTACH\tCAUSE\tMISSES\tNODES\tKERNELS\tPODS\tSINCE\n")
	for _, r := range d.Misses {
		names := make([]string, len(r.Nodes))
		for i, n := range r.Nodes {
			names[i] = n.Node
		}
		since := "-"
		if !r.Since.IsZero() {
			since = r.Since.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.0f\t%d: %s\t%s\t%s\t%s\n", r.Program, orDash(r.AttachType), r.Cause, r.Misses,
			len(r.Nodes), list(names, 3), list(r.Kernels, 3), list(r.Pods, 3), since)
	}
}
