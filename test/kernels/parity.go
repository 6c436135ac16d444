package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// parityErrors compares the metrics of entries built from the same Debian
// suite (one kernel release on different architectures or flavours): the
// recursion scenarios are deterministic, so their counts must agree, and a
// difference means one architecture's miss accounting — or bpfleet's
// reading of it — is off. Measures ("~value": timings) are not compared.
func parityErrors(results []*Result) []string {
	bySuite := map[string][]*Result{}
	for _, r := range results {
		if len(r.Metrics) > 0 {
			bySuite[r.Entry.Suite] = append(bySuite[r.Entry.Suite], r)
		}
	}
	var errs []string
	for suite, rs := range bySuite {
		for _, m := range metricNames(rs) {
			vals := map[string][]string{}
			for _, r := range rs {
				if v, ok := r.Metrics[m]; ok && !strings.HasPrefix(v, "~") {
					vals[v] = append(vals[v], r.Entry.Name)
				}
			}
			if len(vals) > 1 {
				var parts []string
				for v, es := range vals {
					parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(es, ",")))
				}
				sort.Strings(parts)
				errs = append(errs, fmt.Sprintf("%s: %s differs: %s", suite, m, strings.Join(parts, "; ")))
			}
		}
	}
	sort.Strings(errs)
	return errs
}

func metricNames(rs []*Result) []string {
	seen := map[string]bool{}
	var names []string
	for _, r := range rs {
		for m := range r.Metrics {
			if !seen[m] {
				seen[m] = true
				names = append(names, m)
			}
		}
	}
	sort.Strings(names)
	return names
}

func printMetrics(w io.Writer, results []*Result) {
	names := metricNames(results)
	if len(names) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "metric")
	for _, r := range results {
		fmt.Fprint(tw, "\t", r.Entry.Name)
	}
	fmt.Fprintln(tw)
	for _, m := range names {
		fmt.Fprint(tw, m)
		for _, r := range results {
			v, ok := r.Metrics[m]
			if !ok {
				v = "-"
			}
			fmt.Fprint(tw, "\t", v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
