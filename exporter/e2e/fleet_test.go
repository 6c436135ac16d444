package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/pods"
)

// The fleet test: N in-process exporters, each with its own node name (so
// its own service.instance.id in Prometheus), fed the snapshot of ONE real
// scan of really loaded programs per round, export over OTLP/HTTP (gzip,
// as the agent does) into a real Prometheus while the programs are
// reloaded (closed and loaded again: new ids) between rounds.
//
// Why not N real `bpfleet agent` processes: on 2 cores, 50 agents each
// scanning 1,000 programs every interval measure the scans fighting for
// the CPU, not the telemetry this test is about; the scan has its own
// bench (make bench BENCH=scan). The exporters here are the agent's own
// (exporter.New, Update, the OTLP exporter and its HTTP client); only the
// clock is ours: each round is exported with ForceFlush, so a round is one
// export per node.

// fleetConfig is one fleet run.
type fleetConfig struct {
	agents, programs, reloads int
	// names is how many distinct program names the programs have (0: all
	// distinct, the workload level's worst case).
	names int
	level exporter.Level
	// collector puts a real OpenTelemetry Collector (otlp receiver, batch,
	// otlphttp to Prometheus) between the agents and Prometheus, as fleets
	// deploy it; bytes are then counted between the agents and the
	// Collector.
	collector bool
	// pods adds that many pods (test/pods) with every per-pod kind of
	// program real nodes run (runc's device program, cgroup_skb/sock
	// links, tc, tcx and XDP on the pod's veth), restarted with every
	// reload, half of them named by a pod API (Deployment shop/web).
	pods int
}

type fleetRound struct {
	headSeries                float64
	bytes, rawBytes, requests int64 // on the wire, decompressed, export requests
	samples                   float64
	wall, cpu                 time.Duration
}

type fleetResult struct {
	cfg    fleetConfig
	rounds []fleetRound
	// heapPerAgent is the Go heap the exporters hold, per agent.
	heapPerAgent uint64
	promCPU      float64 // seconds Prometheus spent over the run
	promRSS      float64 // Prometheus' resident memory at the end
	// The Collector's resident memory (KB) at the end and CPU over the
	// run, with fleetConfig.collector.
	colRSSKB int
	colCPU   time.Duration
}

// countingProxy forwards OTLP requests to Prometheus and counts their
// bytes: as sent (gzip) and decompressed.
type countingProxy struct {
	url                       string
	bytes, rawBytes, requests atomic.Int64
}

// startCountingProxy forwards to target; base is the OTLP base path there
// ("/api/v1/otlp" for Prometheus, "" for a Collector).
func startCountingProxy(t testing.TB, target, base string) *countingProxy {
	t.Helper()
	u, err := url.Parse("http://" + target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &countingProxy{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		p.requests.Add(1)
		p.bytes.Add(int64(len(body)))
		raw := int64(len(body))
		if r.Header.Get("Content-Encoding") == "gzip" {
			if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
				raw, _ = io.Copy(io.Discard, zr)
			}
		}
		p.rawBytes.Add(raw)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + l.Addr().String() + base
	return p
}

// promMetrics reads Prometheus' own /metrics.
func promMetrics(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j] // summed over labels
		}
		out[name] += v
	}
	return out
}

// loadFleetPrograms loads n trivial socket filters named flt_0000... (a
// name survives a reload, an id does not).
func loadFleetPrograms(t testing.TB, n, names int) ([]*ebpf.Program, map[uint32]bool) {
	t.Helper()
	progs := make([]*ebpf.Program, 0, n)
	ids := make(map[uint32]bool, n)
	for i := range n {
		p, err := loadFleetProgram(i % names)
		if err != nil {
			for _, q := range progs {
				q.Close()
			}
			t.Fatalf("loading program %d of %d: %v", i, n, err)
		}
		progs = append(progs, p)
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids[uint32(id)] = true
	}
	return progs, ids
}

// loadFleetProgram loads the trivial socket filter named flt_<name>.
func loadFleetProgram(name int) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: fmt.Sprintf("flt_%04d", name), Type: ebpf.SocketFilter, License: "MIT",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
}

// ours keeps the programs this test loaded: the machine is shared, and
// other programs come and go.
func ours(s *agent.Snapshot, ids map[uint32]bool) *agent.Snapshot {
	c := *s
	c.Programs = nil
	types := map[string]bool{}
	for _, p := range s.Programs {
		if ids[p.ID] {
			c.Programs = append(c.Programs, p)
			types[p.AttachType] = true
		}
	}
	c.AttachTypes = nil
	for _, at := range s.AttachTypes {
		if types[at.AttachType] {
			c.AttachTypes = append(c.AttachTypes, at)
		}
	}
	c.Owners, c.Episodes, c.Calibration = nil, nil, nil
	c.Scan.Links = 0
	return &c
}

// scanOurs is one scan of a, with the programs of ids only, all of them.
func scanOurs(t testing.TB, a *agent.Agent, ids map[uint32]bool, round int) *agent.Snapshot {
	t.Helper()
	snap, err := a.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	snap = ours(snap, ids)
	if len(snap.Programs) != len(ids) {
		t.Fatalf("round %d: the scan saw %d of the %d programs loaded", round, len(snap.Programs), len(ids))
	}
	return snap
}

// procStat returns a process's resident memory and CPU time from /proc.
func procStat(t testing.TB, pid int) (rssKB int, cpu time.Duration) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			rssKB, _ = strconv.Atoi(f[1])
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th, in clock ticks (100 Hz on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return rssKB, time.Duration(ut+st) * 10 * time.Millisecond
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runFleet(t testing.TB, cfg fleetConfig) fleetResult {
	t.Helper()
	prom := backends.StartPrometheus(t)
	target, base := prom.Addr, "/api/v1/otlp"
	var col *backends.Collector
	if cfg.collector {
		col = backends.StartCollector(t, prom, backends.StartJaeger(t))
		target, base = col.OTLPHTTP, ""
	}
	proxy := startCountingProxy(t, target, base)

	a, err := agent.New(agent.Config{Owners: true, NoIterator: true, QuietIntervals: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx := context.Background()
	var set *pods.Set
	var api *podAPI
	if cfg.pods > 0 {
		set = pods.New(t, cfg.pods, pods.Kinds...)
		api = startPodAPI(t, "fleet")
		a.SetOwnerFiller(api.cache)
	}

	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	exps := make([]*exporter.Exporter, cfg.agents)
	for i := range exps {
		e, err := exporter.New(ctx, exporter.Config{
			Level: cfg.level, MaxPrograms: 0, NodeName: fmt.Sprintf("fleet-%03d", i),
			OTel:     metricsTo(t, proxy.url),
			Interval: time.Hour, // exported by ForceFlush, one export per round
			Kernel:   a.Kernel(),
		})
		if err != nil {
			t.Fatal(err)
		}
		exps[i] = e
		t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	}

	res := fleetResult{cfg: cfg}
	promCPU0 := promMetrics(t, prom.Addr)["process_cpu_seconds_total"]
	var progs []*ebpf.Program
	defer func() {
		for _, p := range progs {
			p.Close()
		}
	}()
	for round := 0; round <= cfg.reloads; round++ {
		// Reload: every program closes, the same names load again.
		for _, p := range progs {
			p.Close()
		}
		var ids map[uint32]bool
		names := cfg.names
		if names == 0 {
			names = cfg.programs
		}
		progs, ids = loadFleetPrograms(t, cfg.programs, names)
		if set != nil {
			if round > 0 {
				set.Restart(t)
			}
			api.publish(t, set)
			for id := range set.IDs() {
				ids[id] = true
			}
		}
		snap := scanOurs(t, a, ids, round)
		before := promMetrics(t, prom.Addr)
		b0, r0, q0 := proxy.bytes.Load(), proxy.rawBytes.Load(), proxy.requests.Load()
		start, cpu0 := time.Now(), cpuTime()
		var wg sync.WaitGroup
		errs := make(chan error, len(exps))
		for _, e := range exps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.Update(ctx, snap)
				if err := e.ForceFlush(ctx); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: export: %v", round, err)
		}
		r := fleetRound{wall: time.Since(start), cpu: cpuTime() - cpu0}
		if col != nil {
			// The Collector batches: wait until Prometheus has appended
			// every node's export (its sample count stops moving).
			settled(t, prom.Addr)
		}
		after := promMetrics(t, prom.Addr)
		r.headSeries = after["prometheus_tsdb_head_series"]
		r.samples = after["prometheus_tsdb_head_samples_appended_total"] - before["prometheus_tsdb_head_samples_appended_total"]
		r.bytes, r.rawBytes, r.requests = proxy.bytes.Load()-b0, proxy.rawBytes.Load()-r0, proxy.requests.Load()-q0
		res.rounds = append(res.rounds, r)
		if round == 0 {
			runtime.GC()
			var m1 runtime.MemStats
			runtime.ReadMemStats(&m1)
			if m1.HeapInuse > m0.HeapInuse {
				res.heapPerAgent = (m1.HeapInuse - m0.HeapInuse) / uint64(cfg.agents)
			}
		}
		if r.requests != int64(cfg.agents) {
			t.Errorf("round %d: %d export requests for %d agents", round, r.requests, cfg.agents)
		}
	}
	if col != nil {
		res.colRSSKB, res.colCPU = procStat(t, col.PID())
	}
	end := promMetrics(t, prom.Addr)
	res.promCPU = end["process_cpu_seconds_total"] - promCPU0
	res.promRSS = end["process_resident_memory_bytes"]
	return res
}

// settled waits until Prometheus' appended-sample count has not moved for
// a second (at most 30 s).
func settled(t testing.TB, addr string) {
	t.Helper()
	last, still := -1.0, 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && still < 5; {
		n := promMetrics(t, addr)["prometheus_tsdb_head_samples_appended_total"]
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r fleetResult) report(t testing.TB) {
	t.Helper()
	c := r.cfg
	first, last := r.rounds[0], r.rounds[len(r.rounds)-1]
	n := float64(c.agents)
	var wall, cpu time.Duration
	var bytes, raw, samples float64
	for _, x := range r.rounds {
		wall += x.wall
		cpu += x.cpu
		bytes += float64(x.bytes)
		raw += float64(x.rawBytes)
		samples += x.samples
	}
	rounds := float64(len(r.rounds))
	names := c.names
	if names == 0 {
		names = c.programs
	}
	via := "straight into Prometheus"
	if c.collector {
		via = "through the OpenTelemetry Collector"
	}
	perPod := ""
	if c.pods > 0 {
		perPod = fmt.Sprintf(" + %d pods x %d per-pod programs (restarted with each reload)", c.pods, len(pods.Kinds))
	}
	t.Logf("BENCH fleet level=%v agents=%d programs=%d names=%d%s reloads=%d, %s", c.level, c.agents, c.programs, names, perPod, c.reloads, via)
	t.Logf("BENCH   head series: %.0f after the first export, %.0f after %d reloads (%+.1f%%); %.0f per node",
		first.headSeries, last.headSeries, c.reloads, 100*(last.headSeries-first.headSeries)/first.headSeries, first.headSeries/n)
	t.Logf("BENCH   bytes per export per node: %.1f KB gzip on the wire, %.1f KB uncompressed (%.1fx)",
		bytes/rounds/n/1000, raw/rounds/n/1000, raw/bytes)
	t.Logf("BENCH   samples per export round: %.0f (%.0f per node); at a 10s export interval %.0f samples/s and %.1f KB/s for the %d nodes",
		samples/rounds, samples/rounds/n, samples/rounds/10, bytes/rounds/10/1000, c.agents)
	t.Logf("BENCH   exporter CPU per export per node %.1f ms (wall %.0f ms for the %d nodes' round); Go heap per exporter %.1f MB; Prometheus CPU %.1f s over %d rounds, RSS %.0f MB",
		float64(cpu.Microseconds())/1000/rounds/n, float64(wall.Milliseconds())/rounds, c.agents, float64(r.heapPerAgent)/1e6, r.promCPU, len(r.rounds), r.promRSS/1e6)
	if c.collector {
		t.Logf("BENCH   Collector CPU %.1f s over %d rounds (%.1f ms per node export), RSS %.0f MB",
			r.colCPU.Seconds(), len(r.rounds), float64(r.colCPU.Microseconds())/1000/rounds/n, float64(r.colRSSKB)/1000)
	}
}

// TestFleetSmall is the CI-sized fleet: 3 nodes, 200 programs and 6 pods
// (each with the 6 per-pod kinds of program), 2 reloads and pod restarts.
// At the workload level Prometheus' head series stay within 5% of the
// first export's; at the program level the same reloads add series (the
// check can fail, and does for the program level).
func TestFleetSmall(t *testing.T) {
	w := runFleet(t, fleetConfig{agents: 3, programs: 200, pods: 6, reloads: 2, level: exporter.LevelWorkload})
	w.report(t)
	first, last := w.rounds[0].headSeries, w.rounds[len(w.rounds)-1].headSeries
	if math.Abs(last-first)/first > 0.05 {
		t.Errorf("workload level: head series %.0f after 2 reloads, %.0f before: more than 5%% apart", last, first)
	}
	p := runFleet(t, fleetConfig{agents: 3, programs: 200, pods: 6, reloads: 2, level: exporter.LevelProgram})
	p.report(t)
	pf, pl := p.rounds[0].headSeries, p.rounds[len(p.rounds)-1].headSeries
	if pl < 2*pf {
		t.Errorf("program level: head series %.0f after 2 reloads, %.0f before; want them to grow with the new ids (the test is blind otherwise)", pl, pf)
	}
	if b, n := float64(w.rounds[0].bytes), float64(w.rounds[0].rawBytes); b > n/4 {
		t.Errorf("workload level export %.0f bytes on the wire for %.0f uncompressed: not gzipped?", b, n)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_COMPRESSION") != "" {
		t.Log("OTEL_EXPORTER_OTLP_COMPRESSION is cleared for this test")
	}
	// The same through a real Collector: its batching must not turn the
	// reloads into new series either, and every node's series arrive.
	c := runFleet(t, fleetConfig{agents: 3, programs: 200, pods: 6, reloads: 2, level: exporter.LevelWorkload, collector: true})
	c.report(t)
	cf, cl := c.rounds[0].headSeries, c.rounds[len(c.rounds)-1].headSeries
	if math.Abs(cl-cf)/cf > 0.05 || math.Abs(cf-first)/first > 0.05 {
		t.Errorf("through the Collector: head series %.0f after 2 reloads, %.0f before (%.0f straight into Prometheus)", cl, cf, first)
	}
}
