package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/syncbuf"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
	"github.com/bpfleet/bpfleet/test/pods"
)

// soakEnv selects the long versions of the soak scenarios (make soak sets
// it to "long"); unset, each runs its short version inside make test.
const soakEnv = "BPFLEET_SOAK"

func soakLong() bool { return os.Getenv(soakEnv) == "long" }

// soakStatsEnv sets the soak agents' --stats mode (make soak STATS=off):
// an agent holding BPF stats for an hour disturbs other BPF tests run on
// the same machine meanwhile (they see another holder). Unset: each
// scenario's own mode.
const soakStatsEnv = "BPFLEET_SOAK_STATS"

// soakArgs adds the --stats mode of soakStatsEnv to an agent's arguments.
func soakArgs(args ...string) []string {
	if m := os.Getenv(soakStatsEnv); m != "" {
		return append(args, "--stats", m)
	}
	return args
}

// outage is one window in which the Collector was down.
type outage struct{ from, to time.Time }

// TestSoakFlappingCollector: the OpenTelemetry Collector between the
// agents and the backends is stopped and restarted again and again
// (long: every 5 minutes for an hour, down 30 s each time; short: every
// 30 s for 100 s, down 8 s), with one agent exporting over OTLP/HTTP and
// one over gRPC, while the recursion canary misses in bursts (one miss
// episode each, two spans: open and closed). Afterwards:
//   - metrics: each agent's cumulative misses in Prometheus equal the
//     kernel's count, and no point is missing outside the outage windows:
//     the HTTP agent sends every series in every export
//     (--resend-unchanged 0), so any gap of more than 3 exports outside an
//     outage is a lost point; the gRPC agent runs the default, which sends
//     a series that did not move every 30 s, so only a longer gap is;
//   - spans: every episode span an agent emitted is in Jaeger or counted in
//     its bpf.agent.spans.dropped (a small export queue, 6 spans, so the
//     outages overflow it);
//   - memory: each agent's RSS after the run within 16 MiB of after the
//     first cycle.
func TestSoakFlappingCollector(t *testing.T) {
	total, cycle, down := 100*time.Second, 30*time.Second, 8*time.Second
	if soakLong() {
		total, cycle, down = time.Hour, 5*time.Minute, 30*time.Second
	}
	c, id := canarytest.Load(t)
	prom := backends.StartPrometheus(t)
	jg := backends.StartJaeger(t)
	col := backends.StartCollector(t, prom, jg)

	// Short export and BSP timeouts: an export to a dead Collector fails
	// within the outage instead of holding the queue for 30 s.
	common := []string{"OTEL_BSP_MAX_QUEUE_SIZE=6", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=6", "OTEL_BSP_EXPORT_TIMEOUT=2000", "OTEL_EXPORTER_OTLP_TIMEOUT=1000"}
	agents := map[string]*agentProc{
		"flap-http": startAgent(t, append([]string{"K8S_NODE_NAME=flap-http", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.OTLPHTTP}, common...), soakArgs("--metrics-level", "program", "--resend-unchanged", "0")...),
		"flap-grpc": startAgent(t, append([]string{"K8S_NODE_NAME=flap-grpc", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.OTLPGRPC}, common...), soakArgs("--metrics-level", "program")...),
	}
	rss := map[string]int64{}
	// Each agent's first scan must see the canary before its first burst:
	// misses before it are its baseline, no episode.
	for name := range agents {
		sel := fmt.Sprintf(`sum without (bpf_miss_cause) (bpf_program_recursion_misses_total{bpf_program_id="%d", instance=%q})`, id, name)
		if err := backends.Eventually(30*time.Second, func() error {
			s, err := prom.Query(context.Background(), sel)
			if err == nil && len(s) != 1 {
				err = fmt.Errorf("no series %s yet", sel)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Bursts: 3 misses, then 2.5 s quiet (5 intervals; 2 close an episode).
	start := time.Now()
	var outages []outage
	bursts := 0
	nextKill := start.Add(cycle - down)
	for time.Since(start) < total {
		trigger(t, c, 3)
		bursts++
		time.Sleep(2500 * time.Millisecond)
		if time.Now().After(nextKill) {
			if len(outages) == 1 {
				for name, a := range agents {
					rss[name] = procRSS(t, a.cmd.Process.Pid)
				}
			}
			o := outage{from: time.Now()}
			col.Stop()
			for end := time.Now().Add(down); time.Now().Before(end); {
				trigger(t, c, 3)
				bursts++
				time.Sleep(2500 * time.Millisecond)
			}
			if err := col.Start(); err != nil {
				t.Fatalf("restarting the Collector: %v", err)
			}
			o.to = time.Now()
			outages = append(outages, o)
			nextKill = nextKill.Add(cycle)
		}
	}
	// The last episode closes, the last exports go out.
	time.Sleep(3 * time.Second)
	want := kernelMisses(t, c)
	t.Logf("%d bursts, %d misses, %d Collector outages over %s", bursts, want, len(outages), time.Since(start).Round(time.Second))

	ctx := context.Background()
	for name, a := range agents {
		sel := fmt.Sprintf(`sum without (bpf_miss_cause) (bpf_program_recursion_misses_total{bpf_program_id="%d", instance=%q})`, id, name)
		if err := backends.Eventually(30*time.Second, func() error {
			s, err := prom.Query(ctx, sel)
			if err != nil {
				return err
			}
			if len(s) != 1 || s[0].Value != float64(want) {
				return fmt.Errorf("%s: %v, want %d (the kernel's)", sel, s, want)
			}
			return nil
		}); err != nil {
			t.Errorf("cumulative misses after the flapping: %v", err)
		}
		quiet := 3 * interval
		if name == "flap-grpc" {
			quiet += config.DefaultResendUnchanged
		}
		// Gaps in the unexplained series: there from the first scan, sent
		// with the program's other counters.
		rawSel := fmt.Sprintf(`bpf_program_recursion_misses_total{bpf_program_id="%d", instance=%q, bpf_miss_cause="unexplained"}`, id, name)
		checkGaps(t, prom, rawSel, fmt.Sprintf(`bpf_agent_scans_total{instance=%q}`, name), quiet, time.Since(start)+time.Minute, outages)

		if before, after := rss[name], procRSS(t, a.cmd.Process.Pid); before > 0 && after > before+16<<20 {
			t.Errorf("%s: RSS %d MiB after the first cycle, %d MiB at the end", name, before>>20, after>>20)
		} else {
			t.Logf("%s: RSS %d MiB after the first cycle, %d MiB at the end", name, before>>20, after>>20)
		}
		a.stop(t)
	}

	// Spans: after the agents stopped (their last spans flushed), each
	// agent's delivered + dropped = emitted = 2 per episode.
	for name := range agents {
		var delivered int
		var dropped float64
		err := backends.Eventually(30*time.Second, func() error {
			ss, err := prom.Query(ctx, fmt.Sprintf(`bpf_agent_spans_dropped_total{instance=%q}`, name))
			if err != nil {
				return err
			}
			dropped = 0
			if len(ss) == 1 {
				dropped = ss[0].Value
			}
			spans, err := jg.Spans(ctx, "bpfleet-agent", map[string]string{"bpf.program.id": strconv.FormatUint(uint64(id), 10)})
			if err != nil {
				return err
			}
			delivered = 0
			for _, s := range spans {
				if s.Process["k8s.node.name"] == name && strings.HasPrefix(s.OperationName, "bpf.recursion_miss") {
					delivered++
				}
			}
			// Every span delivered or counted, none twice in Jaeger. Both
			// at once is possible and allowed: an export that timed out
			// at the agent after the Collector took it (the hour-long run:
			// 2 of 2,878 spans per agent) is counted dropped and arrives.
			if delivered+int(dropped) < 2*bursts || delivered > 2*bursts {
				return fmt.Errorf("%s: %d spans in Jaeger + %v counted dropped, want %d (2 per burst), none of them lost uncounted", name, delivered, dropped, 2*bursts)
			}
			return nil
		})
		t.Logf("%s: %d episode spans in Jaeger, %v counted dropped, of %d", name, delivered, dropped, 2*bursts)
		if err != nil {
			t.Error(err)
		}
	}
}

// checkGaps fails for any gap between consecutive samples of sel longer
// than quiet (the longest an agent leaves the series out with nothing
// lost) that no outage window (plus 3 s for the exporter to notice the
// Collector back) explains.
func checkGaps(t *testing.T, prom *backends.Prometheus, sel, scansSel string, quiet, window time.Duration, outages []outage) {
	t.Helper()
	series, err := prom.RawSamples(context.Background(), sel, window)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's scan count, exported with every point: a gap across
	// which it rose by one is a stretch in which the agent made no scan
	// (a starved CPU), so no point was made to be lost.
	scanSeries, err := prom.RawSamples(context.Background(), scansSel, window)
	if err != nil {
		t.Fatal(err)
	}
	var scans []backends.Point
	for _, pts := range scanSeries {
		scans = pts
	}
	scanAt := func(at time.Time) (float64, bool) {
		i := sort.Search(len(scans), func(i int) bool { return !scans[i].Time.Before(at) })
		if i < len(scans) && scans[i].Time.Sub(at).Abs() < interval/2 {
			return scans[i].Value, true
		}
		return 0, false
	}
	for _, pts := range series {
		longest := time.Duration(0)
		for i := 1; i < len(pts); i++ {
			gap := pts[i].Time.Sub(pts[i-1].Time)
			longest = max(longest, gap)
			if gap <= quiet {
				continue
			}
			explained := false
			for _, o := range outages {
				if pts[i-1].Time.Before(o.to.Add(3*time.Second)) && pts[i].Time.After(o.from) {
					explained = true
				}
			}
			from, to := pts[i-1].Time.Format(time.TimeOnly), pts[i].Time.Format(time.TimeOnly)
			a, okA := scanAt(pts[i-1].Time)
			b, okB := scanAt(pts[i].Time)
			switch {
			case explained:
			case i == 1 && pts[0].Value == 0 && !okA:
				// Not an export (every export carries the scan count):
				// the zero Prometheus writes at the counter's start time
				// (created-timestamp-zero-ingestion), the program's load,
				// which may precede the agent's first scan by seconds on
				// a busy machine (6.6 s in an hour-long run).
				t.Logf("%s: the first sample, at %s, is the counter's start-time zero; the first export came at %s", sel, from, to)
			case okA && okB && b-a <= 1:
				t.Logf("%s: no point from %s to %s (%s), outside every outage window, and no scan either (scan count %v then %v): the agent did not run, nothing was lost", sel, from, to, gap, a, b)
			default:
				t.Errorf("%s: no point from %s to %s (%s), outside every outage window; the agent's scan count across it %v (%v) then %v (%v)", sel, from, to, gap, a, okA, b, okB)
			}
		}
		t.Logf("%s: %d points, longest gap %s (Collector down %d times)", sel, len(pts), longest.Round(time.Millisecond), len(outages))
	}
}

// procRSS is a process's resident set in bytes (procStat's VmRSS).
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	kb, _ := procStat(t, pid)
	return int64(kb) << 10
}

// churnNames are the programs' names: a fixed pool, as a node's tools
// reload the same programs, so the workload keys stay a bounded set.
const churnNames = 20

// TestSoakProgramChurn: programs of the kinds real nodes run loaded and
// unloaded under the agent at the chart's settings (sampled stats, the
// workload level; scans every 10 s long, 1 s short) with `bpfleet list
// --watch -o jsonl` beside it: socket filters, raw_tp programs attached to
// task_rename, and pods (test/pods) with runc's cgroup_device program on
// per-pod cgroups, restarted every round. Long: 100,000 programs over 30
// minutes; short: about 3,000 over 40 s. Afterwards: the agent's RSS
// within 10% (long; 16 MiB short) of after warm-up, no scan error, every
// churned program gone from the kernel (the agent kept none alive), and
// no series generation added: the workload series over the whole run
// within 1.05× their keys, none with an instance's label, one key per
// churned name (checkChurnGenerations).
func TestSoakProgramChurn(t *testing.T) {
	total, scanEvery, perRound := 40*time.Second, time.Second, 40
	if soakLong() {
		// 60 programs and 5 pods' device programs a round of about 1.1 s:
		// about 100,000 in 30 minutes.
		total, scanEvery, perRound = 30*time.Minute, 10*time.Second, 60
	}
	prom := backends.StartPrometheus(t)
	node := "soak-churn"
	a := startAgent(t, []string{"K8S_NODE_NAME=" + node, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + prom.OTLPEndpoint(), "OTEL_TRACES_EXPORTER=none"},
		"--interval", scanEvery.String(), "--metrics-level", "workload", "--max-programs", "1000",
		"--stats", "sampled", "--stats-window", "1s", "--stats-period", "10s")
	list := exec.Command(bpfleetBin, "list", "--watch", "-o", "jsonl", "--interval", scanEvery.String())
	listOut := &syncbuf.Buffer{}
	list.Stdout, list.Stderr = listOut, listOut
	if err := list.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = list.Process.Kill(); _ = list.Wait() })

	set := pods.New(t, 5, pods.Device)
	var loaded []uint32
	round := func() {
		// One second's programs: loaded, held for the second, unloaded.
		var progs []*ebpf.Program
		var links []link.Link
		for i := 0; i < perRound; i++ {
			name := fmt.Sprintf("soak_%02d", i%churnNames)
			spec := &ebpf.ProgramSpec{Name: name, Type: ebpf.SocketFilter, License: "GPL",
				Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
			if i%2 == 1 {
				spec = &ebpf.ProgramSpec{Name: name, Type: ebpf.RawTracepoint, License: "GPL",
					Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}
			}
			p, err := ebpf.NewProgram(spec)
			if err != nil {
				t.Fatalf("loading %s: %v", name, err)
			}
			if spec.Type == ebpf.RawTracepoint {
				l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "task_rename", Program: p})
				if err != nil {
					t.Fatalf("attaching %s to task_rename: %v", name, err)
				}
				links = append(links, l)
			}
			info, err := p.Info()
			if err == nil {
				if id, ok := info.ID(); ok {
					loaded = append(loaded, uint32(id))
				}
			}
			progs = append(progs, p)
		}
		for id := range set.IDs() {
			loaded = append(loaded, id)
		}
		time.Sleep(time.Second)
		for _, l := range links {
			l.Close()
		}
		for _, p := range progs {
			p.Close()
		}
		set.Restart(t)
	}

	start := time.Now()
	var warm int64
	rounds := 0
	for time.Since(start) < total {
		round()
		rounds++
		if warm == 0 && time.Since(start) > total/5 {
			warm = procRSS(t, a.cmd.Process.Pid)
		}
	}
	time.Sleep(2 * scanEvery)
	end := procRSS(t, a.cmd.Process.Pid)
	t.Logf("%d rounds, %d programs loaded and unloaded in %s; agent RSS %d MiB after warm-up, %d MiB at the end",
		rounds, len(loaded), time.Since(start).Round(time.Second), warm>>20, end>>20)
	if soakLong() {
		if d := float64(end-warm) / float64(warm); d > 0.10 || d < -0.10 {
			t.Errorf("agent RSS moved %.1f%% from after warm-up (%d → %d MiB), want within 10%%", 100*d, warm>>20, end>>20)
		}
	} else if end > warm+16<<20 {
		t.Errorf("agent RSS grew from %d to %d MiB", warm>>20, end>>20)
	}

	// No program kept alive: every one is gone once the kernel freed it,
	// but the last generation of pods' (removed when the test ends).
	live := set.IDs()
	if err := backends.Eventually(10*time.Second, func() error {
		alive := 0
		for _, id := range loaded {
			if live[id] {
				continue
			}
			if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				p.Close()
				alive++
			}
		}
		if alive > 0 {
			return fmt.Errorf("%d of %d churned programs still loaded", alive, len(loaded))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	ctx := context.Background()
	errs, err := prom.Query(ctx, fmt.Sprintf(`bpf_agent_scan_errors_total{instance=%q}`, node))
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || errs[0].Value != 0 {
		t.Errorf("scan errors: %v, want one series at 0", errs)
	}
	checkChurnGenerations(t, prom, node, start)
	// One line per list interval (the scan interval): at least half of
	// them over the run, however long the rounds took.
	lines, intervals := strings.Count(listOut.String(), "\n"), int(time.Since(start)/scanEvery)
	if lines < intervals/2 || strings.Contains(listOut.String(), "level=ERROR") {
		t.Errorf("bpfleet list --watch wrote %d lines over %d intervals of %s: %s", lines, intervals, scanEvery, tail(listOut.String()))
	}
	t.Logf("bpfleet list --watch -o jsonl: %d lines", lines)
	a.stop(t)
}

// workloadKeyLabels are the workload key's labels (exporter/workload.go,
// workloadKey.kvs), as Prometheus names them: what stays the same when a
// program is reloaded or its pod restarted.
var workloadKeyLabels = []string{"bpf_program_name", "bpf_program_type", "bpf_attach_type", "bpf_attach_target", "bpf_miss_kind",
	"k8s_namespace_name", "k8s_workload_kind", "k8s_workload_name", "process_executable_name"}

// instanceLabels name one program, process, container or pod: each reload
// or restart would start a new series under them.
var instanceLabels = []string{"bpf_program_id", "bpf_program_tag", "process_pid", "container_id", "k8s_pod_name"}

// checkChurnGenerations holds the node's workload series of
// bpf_program_run_count_total over the whole run (every label set the TSDB
// holds from start on, whatever the lookback) to their generations: no
// series carries an instance's label, and the label sets are at most 1.05×
// the workload keys among them, so a label outside the key that changes
// per reload, restart or scan (a new generation of every key) fails it;
// each of the test's own churned names is one key (a raw_tp one a second,
// attach type unattached, when a scan sees it between its load and its
// attach), so a key label that changes per load fails it too. (Series ever against the live
// set cannot tell: a key whose programs unloaded is exported for
// workloadGrace, 15 minutes, so every generation is still live at the end.)
// With fewer than 20 keys 1.05× allows no extra label set at all.
func checkChurnGenerations(t *testing.T, prom *backends.Prometheus, node string, start time.Time) {
	t.Helper()
	series, err := prom.Series(context.Background(), fmt.Sprintf(`bpf_program_run_count_total{instance=%q}`, node), start.Add(-time.Minute), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	// ours counts the churned names' keys by name and attached or not.
	type nameState struct {
		name       string
		unattached bool
	}
	ours := map[nameState]map[string]bool{}
	bad := map[string]bool{}
	for _, s := range series {
		for _, l := range instanceLabels {
			if _, ok := s[l]; ok && !bad[l] {
				bad[l] = true
				t.Errorf("workload series carry %s (%s): a label of one instance, a new series at every reload or restart", l, s[l])
			}
		}
		var k strings.Builder
		for _, l := range workloadKeyLabels {
			fmt.Fprintf(&k, "%s=%q,", l, s[l])
		}
		keys[k.String()]++
		if name := s["bpf_program_name"]; strings.HasPrefix(name, "soak_") {
			ns := nameState{name, s["bpf_attach_type"] == "unattached"}
			if ours[ns] == nil {
				ours[ns] = map[string]bool{}
			}
			ours[ns][k.String()] = true
		}
	}
	names, ourKeys, ownerless := map[string]bool{}, 0, 0
	for ns, ks := range ours {
		names[ns.name] = true
		ourKeys += len(ks)
		// A program unloaded after the scan read it and before its owner
		// walk (the round closes its programs at any moment of a scan) is
		// exported once without an owner: one more key for the name, the
		// same but for an empty process_executable_name. Counted, and
		// allowed once; a label that changes per load makes a key per
		// load and fails.
		if len(ks) == 2 && sameButOwner(ks) {
			ownerless++
			continue
		}
		if len(ks) > 1 {
			t.Errorf("churned name %s (unattached %v) made %d workload keys, want 1: a key label changes per load: %v", ns.name, ns.unattached, len(ks), ks)
		}
	}
	t.Logf("workload series of bpf_program_run_count_total over the run: %d label sets of %d workload keys; the %d churned names: %d keys, %d of them the ownerless one of a program unloaded between a scan's read and its owner walk",
		len(series), len(keys), len(names), ourKeys, ownerless)
	if len(keys) == 0 || float64(len(series)) > 1.05*float64(len(keys)) {
		var gens []string
		for k, n := range keys {
			if n > 1 {
				gens = append(gens, fmt.Sprintf("%s: %d", k, n))
			}
		}
		sort.Strings(gens)
		t.Errorf("%d label sets for %d workload keys, above 1.05×: churn added series generations; keys with more than one: %s", len(series), len(keys), tail(strings.Join(gens, "; ")))
	}
	if len(names) != churnNames {
		t.Errorf("%d churned names in the workload series, want %d", len(names), churnNames)
	}
}

// sameButOwner says the two workload keys in ks differ only in that one
// has an empty process_executable_name.
func sameButOwner(ks map[string]bool) bool {
	var a []string
	for k := range ks {
		a = append(a, k)
	}
	const l = "process_executable_name="
	strip := func(k string) (string, bool) {
		i := strings.Index(k, l)
		j := strings.Index(k[i:], ",")
		return k[:i] + k[i+j:], k[i+len(l):i+j] == `""`
	}
	ka, emptyA := strip(a[0])
	kb, emptyB := strip(a[1])
	return ka == kb && emptyA != emptyB
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}
