package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/internal/config"
	fq "github.com/bpfleet/bpfleet/internal/fleetquery"
)

func s(v float64, kv ...string) sample {
	l := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return sample{labels: l, value: v}
}

func fleetCfg() *config.Fleet {
	return &config.Fleet{Prometheus: "http://p:9090", Job: fq.DefaultJob, Pool: fq.DefaultPoolLabel, Since: time.Hour,
		Window: 5 * time.Minute, Timeout: time.Second, Output: "table", Sort: "cpu"}
}

func prog(name, at string, kv ...string) []string {
	return append([]string{fq.Program, name, fq.AttachType, at}, kv...)
}

// TestShapeTop: the answers of `fleet top`'s queries become one row per
// program and attach type, with its share, ns per run, misses by cause,
// nodes and worst node, in --sort order, cut at --limit.
func TestShapeTop(t *testing.T) {
	ans := map[string][]sample{
		// Per node: a's worst node is n7 (0.2 CPUs over 0.8e6 runs a
		// second: 250 ns a run), the sums 0.3 CPUs and 3e6 runs.
		"cpu": {s(0.1, prog("a", "fentry", fq.Instance, "n1")...), s(0.2, prog("a", "fentry", fq.Instance, "n7")...),
			s(0.1, prog("b", "kprobe", fq.Instance, "n1")...), s(0, prog("c", "lsm_mac", fq.Instance, "n1")...)},
		"runs":   {s(2.2e6, prog("a", "fentry", fq.Instance, "n1")...), s(0.8e6, prog("a", "fentry", fq.Instance, "n7")...), s(1e5, prog("b", "kprobe", fq.Instance, "n1")...)},
		"misses": {s(4, prog("a", "fentry", fq.Cause, "recursion")...), s(0, prog("a", "fentry", fq.Cause, "unexplained")...), s(7, prog("c", "lsm_mac")...)},
		"nodes":  {s(10, prog("a", "fentry")...), s(2, prog("b", "kprobe")...), s(1, prog("c", "lsm_mac")...)},
	}
	for _, tc := range []struct {
		sort  string
		limit int
		want  []string // program names in order
	}{
		{"cpu", 0, []string{"a", "b", "c"}},
		{"nsrun", 0, []string{"b", "a", "c"}},
		{"misses", 0, []string{"c", "a", "b"}},
		{"nodes", 0, []string{"a", "b", "c"}},
		{"name", 0, []string{"a", "b", "c"}},
		{"misses", 1, []string{"c"}},
	} {
		c := fleetCfg()
		c.Sort, c.Limit = tc.sort, tc.limit
		d := shapeTop(c, ans, time.Time{}).(*topDoc)
		var got []string
		for _, r := range d.Programs {
			got = append(got, r.Program)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("--sort %s --limit %d: %v, want %v", tc.sort, tc.limit, got, tc.want)
		}
	}
	d := shapeTop(fleetCfg(), ans, time.Time{}).(*topDoc)
	a := d.Programs[0]
	if !near(a.Share, 0.75, 1e-9) || !near(a.NsPerRun, 100, 1e-9) || a.Misses != 4 || len(a.Causes) != 1 || a.Causes["recursion"] != 4 ||
		a.Nodes != 10 || a.WorstNode != "n7" || !near(a.WorstNsPerRun, 250, 1e-9) || !near(d.CPU, 0.4, 1e-9) {
		t.Errorf("row a: %+v (fleet CPU %v)", a, d.CPU)
	}
	// A miss series without bpf_miss_cause (an agent from before causes)
	// is unexplained; a program without runs has no ns per run.
	if c := d.Programs[2]; c.Causes["unexplained"] != 7 || c.NsPerRun != 0 {
		t.Errorf("row c: %+v", c)
	}
	var b bytes.Buffer
	if err := writeFleetDoc(&b, fleetCfg(), d, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "PROGRAM") || !strings.Contains(lines[1], "n7 (250 ns)") || !strings.Contains(lines[1], "recursion:4") ||
		!strings.Contains(lines[1], "75.0%") || !strings.Contains(lines[3], "unexplained:7") {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestShapeMisses: one row per program, attach type and cause, with the
// nodes (and their kernels and pools from the node facts), the pods or
// else workloads, and the earliest node's start.
func TestShapeMisses(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) float64 { return float64(t0.Add(d).UnixMilli()) / 1000 }
	ans := map[string][]sample{
		"misses": {
			s(5, prog("a", "fentry", fq.Cause, "recursion", fq.Instance, "n1", fq.Namespace, "sec", fq.Pod, "falco-1", fq.WlKind, "DaemonSet", fq.WlName, "falco")...),
			s(2, prog("a", "fentry", fq.Cause, "recursion", fq.Instance, "n1", fq.Namespace, "sec", fq.Pod, "falco-x", fq.WlKind, "DaemonSet", fq.WlName, "falco")...),
			s(9, prog("a", "fentry", fq.Cause, "recursion", fq.Instance, "n2", fq.Namespace, "sec", fq.WlKind, "DaemonSet", fq.WlName, "falco")...),
			s(1, prog("a", "fentry", fq.Instance, "n3")...),
		},
		"since": {
			s(ts(time.Minute), prog("a", "fentry", fq.Cause, "recursion", fq.Instance, "n1")...),
			s(ts(30*time.Second), prog("a", "fentry", fq.Cause, "recursion", fq.Instance, "n2")...),
		},
		"nodes": {
			s(1, fq.Instance, "n1", fq.Kernel, "6.1", fq.DefaultPoolLabel, "web"),
			s(1, fq.Instance, "n2", fq.Kernel, "5.15", fq.DefaultPoolLabel, "sec"),
		},
	}
	d := shapeMisses(fleetCfg(), ans, time.Time{}).(*missDoc)
	if len(d.Misses) != 2 {
		t.Fatalf("%d rows, want 2: %+v", len(d.Misses), d.Misses)
	}
	r := d.Misses[0]
	if r.Cause != "recursion" || r.Misses != 16 || len(r.Nodes) != 2 || r.Nodes[0].Node != "n2" || r.Nodes[0].Misses != 9 || r.Nodes[1].Misses != 7 ||
		fmt.Sprint(r.Kernels) != "[5.15 6.1]" || fmt.Sprint(r.Pods) != "[sec/DaemonSet/falco sec/falco-1 sec/falco-x]" ||
		!r.Since.Equal(t0.Add(30*time.Second)) || r.Nodes[1].Pool != "web" || !r.Nodes[1].Since.Equal(t0.Add(time.Minute)) {
		t.Errorf("recursion row: %+v", r)
	}
	if u := d.Misses[1]; u.Cause != "unexplained" || u.Misses != 1 || !u.Since.IsZero() || len(u.Kernels) != 0 {
		t.Errorf("unexplained row: %+v", u)
	}
	var b bytes.Buffer
	c := fleetCfg()
	c.Output = "json"
	if err := writeFleetDoc(&b, c, d, false); err != nil {
		t.Fatal(err)
	}
	var back missDoc
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Misses) != 2 || back.Misses[0].Nodes[0].Kernel != "5.15" {
		t.Errorf("json %v: %s", err, b.String())
	}
	if strings.Contains(b.String(), `"since":"0001`) {
		t.Errorf("an unknown start is written as the zero time: %s", b.String())
	}
}

// TestShapeOverhead: per attach type, kernel and pool, the nodes' median
// (PromQL's quantile(0.5): the mean of the middle two of an even count),
// minimum and maximum with the node that has it.
func TestShapeOverhead(t *testing.T) {
	row := func(ns float64, node, at, kernel, pool string) sample {
		return s(ns/1e9, fq.Instance, node, fq.AttachType, at, fq.Kernel, kernel, fq.DefaultPoolLabel, pool)
	}
	ans := map[string][]sample{"overhead": {
		row(40, "n1", "fentry", "6.1", "web"), row(44, "n2", "fentry", "6.1", "web"), row(50, "n3", "fentry", "6.1", "web"), row(50, "n0", "fentry", "6.1", "web"),
		row(30, "n4", "fentry", "6.8", "web"), row(31, "n5", "fentry", "6.8", "web"), row(90, "n6", "fentry", "6.8", "web"),
		row(100, "n7", "kprobe", "6.1", ""),
	}}
	d := shapeOverhead(fleetCfg(), ans, time.Time{}).(*overheadDoc)
	want := []overheadRow{
		{AttachType: "fentry", Kernel: "6.1", Pool: "web", Nodes: 4, MedianNs: 47, MinNs: 40, MaxNs: 50, MaxNode: "n0"},
		{AttachType: "fentry", Kernel: "6.8", Pool: "web", Nodes: 3, MedianNs: 31, MinNs: 30, MaxNs: 90, MaxNode: "n6"},
		{AttachType: "kprobe", Kernel: "6.1", Pool: "", Nodes: 1, MedianNs: 100, MinNs: 100, MaxNs: 100, MaxNode: "n7"},
	}
	if len(d.Overhead) != len(want) {
		t.Fatalf("%+v", d.Overhead)
	}
	for i := range want {
		g := d.Overhead[i]
		if g.AttachType != want[i].AttachType || g.Kernel != want[i].Kernel || g.Pool != want[i].Pool || g.Nodes != want[i].Nodes ||
			!near(g.MedianNs, want[i].MedianNs, 1e-9) || !near(g.MinNs, want[i].MinNs, 1e-9) || !near(g.MaxNs, want[i].MaxNs, 1e-9) || g.MaxNode != want[i].MaxNode {
			t.Errorf("row %d: %+v, want %+v", i, g, want[i])
		}
	}
}

// TestShapeNodes: each agent's state and reasons from its last export,
// scans, final export and flags, judged at now against --window.
func TestShapeNodes(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) float64 { return float64(now.Add(-ago).UnixMilli()) / 1000 }
	n := func(v float64, node string) sample { return s(v, fq.Job, "bpfleet-agent", fq.Instance, node) }
	ans := map[string][]sample{
		"seen": {n(at(time.Second), "ok"), n(at(10*time.Minute), "gone"), n(at(10*time.Minute), "drained"), n(at(time.Second), "stuck"),
			n(at(time.Second), "blind"), n(at(time.Second), "young"), n(at(4*time.Minute), "late")},
		"scans":    {n(30, "ok"), n(0, "stuck"), n(30, "blind"), n(30, "late")},
		"shutdown": {n(0, "ok"), n(1, "drained"), n(0, "gone")},
		"stats":    {n(0, "blind")},
		"watcher":  {n(0, "blind")},
		"errors":   {n(3, "blind")},
		"dropped":  {n(12, "blind")},
	}
	d := shapeNodes(fleetCfg(), ans, now).(*nodesDoc)
	got := map[string]string{}
	for _, r := range d.Nodes {
		got[r.Node] = r.State + ":" + fmt.Sprint(len(r.Reasons))
	}
	want := map[string]string{"gone": "absent:1", "drained": "left:1", "stuck": "stalled:1", "blind": "degraded:4"}
	if fmt.Sprint(got) != fmt.Sprint(want) || d.Agents != 7 || d.OK != 3 || d.Absent != 1 || d.Left != 1 || d.Stalled != 1 || d.Degraded != 1 {
		t.Errorf("%v %+v, want %v with 3 ok (young: one export, no scan figure yet; late: within --window)", got, d, want)
	}
	if d.Nodes[0].Node != "gone" || d.Nodes[3].Node != "drained" {
		t.Errorf("order: absent first, left last: %+v", d.Nodes)
	}
	var b bytes.Buffer
	if err := writeFleetDoc(&b, fleetCfg(), d, true); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.HasPrefix(out, "-- ") || !strings.Contains(out, "7 agents in the last 1h0m0s: 3 ok, 1 absent, 1 stalled, 1 degraded, 1 left") ||
		!strings.Contains(out, "no export for 10m0s (over --window 5m0s)") {
		t.Errorf("watch table:\n%s", out)
	}
}

// TestFleetParams: the flags as PromQL durations; the "since" and
// "last seen" step a 120th of --since, at least a second.
func TestFleetParams(t *testing.T) {
	for _, tc := range []struct {
		since, window            time.Duration
		rng, secs, win, stepWant string
	}{
		{time.Hour, 5 * time.Minute, "3600s", "3600", "300s", "30s"},
		{time.Minute, 8 * time.Second, "60s", "60", "8s", "1s"},
		{2500 * time.Millisecond, 2500 * time.Millisecond, "2500ms", "2.5", "2500ms", "1s"},
		{24 * time.Hour, time.Hour, "86400s", "86400", "3600s", "720s"},
	} {
		c := fleetCfg()
		c.Since, c.Window = tc.since, tc.window
		p := fleetParams(c)
		if p.Range != tc.rng || p.RangeSeconds != tc.secs || p.Window != tc.win || p.Step != tc.stepWant || p.Sel != `job=~"(.+/)?bpfleet-agent"` || p.Pool != fq.DefaultPoolLabel {
			t.Errorf("--since %v --window %v: %+v", tc.since, tc.window, p)
		}
	}
}

func near(got, want, frac float64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	if want < 0 {
		want = -want
	}
	return d <= frac*want
}

// TestMissesSinceShort: misses' second round names the nodes that missed
// only while they are few; 500 of them would make a query past
// VictoriaMetrics' 16 KB -search.maxQueryLen, which refuses it.
func TestMissesSinceShort(t *testing.T) {
	p := fleetParams(fleetCfg())
	for _, n := range []int{3, 500} {
		ans := map[string][]sample{}
		for i := range n {
			ans["misses"] = append(ans["misses"], s(1, prog("canary", "fentry", fq.Instance, fmt.Sprintf("infra-%04d", i), fq.Cause, "preempted")...))
		}
		qs := missesSince(fleetCfg(), p, ans)
		for name, q := range qs {
			if len(q) > 16384 {
				t.Errorf("%d nodes: %s: %d bytes, past VictoriaMetrics' -search.maxQueryLen of 16384", n, name, len(q))
			}
		}
		if named := strings.Contains(qs["nodes"], "infra-0001"); named != (n <= maxNarrowNodes) {
			t.Errorf("%d nodes: node facts name the nodes: %v, want %v", n, named, n <= maxNarrowNodes)
		}
	}
}
