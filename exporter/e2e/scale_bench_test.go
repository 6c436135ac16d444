//go:build bench

package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/nettest"
)

// TestBenchScale is `make bench BENCH=scale`: how one real `bpfleet agent`'s
// cost grows with the node, at 1,000, 3,000 and 10,000 programs with three
// maps per program (BPFLEET_BENCH_SCALE picks the sizes). Each size is a node
// as Cilium, runc and per-pod cgroup programs leave it: programs that share a
// few hundred names, 5% attached to per-pod cgroups, 5% to tcx on veths, two
// XDP programs, the rest unattached, all held by this process (the owner walk
// reads its fd table: programs and maps, one fd each). The agent runs with
// the operator's defaults (--interval 10s, export every interval, gzip, the
// workload level, --max-programs 1000) into a real Prometheus, through a
// proxy that counts the bytes each export carries. Per size: the first scan's
// duration (the agent's own histogram), a steady scan's, the scan right after
// 50 programs were reloaded (new ids: an owner walk), CPU per program per
// scan over BPFLEET_BENCH_WINDOW (default 60s; schedstat) while a process
// holding 20 programs of its own is replaced every 10 s (owners that come
// and go, as pods' loaders do), RSS, series per
// node and bytes per export. The target (issue 33): per-program CPU and RSS
// per program at 10,000 within 1.1x of their value at 1,000.
func TestBenchScale(t *testing.T) {
	sizes := []int{1000, 3000, 10000}
	if v := os.Getenv("BPFLEET_BENCH_SCALE"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n < 100 {
				t.Fatalf("BPFLEET_BENCH_SCALE=%q: want program counts of at least 100, comma separated", v)
			}
			sizes = append(sizes, n)
		}
	}
	window := 60 * time.Second
	if v := os.Getenv("BPFLEET_BENCH_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("BPFLEET_BENCH_WINDOW=%q: want a duration of at least 30s", v)
		}
		window = d
	}
	// The programs and links stay open in this process (their owner is
	// this process, as a loader's are); the maps are pinned and closed, as
	// Cilium's are, so 10,000 programs need about 11,000 fds, not 41,000.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising the fd limit to its hard limit %d: %v", lim.Max, err)
	}
	for _, n := range sizes {
		if need := uint64(n + n/10 + 200); need > lim.Cur {
			t.Fatalf("%d programs need about %d fds; the hard limit here is %d (ulimit -Hn)", n, need, lim.Cur)
		}
	}
	prom := backends.StartPrometheus(t)
	proxy := startCountingProxy(t, prom.Addr, "/api/v1/otlp")

	type row struct {
		progs, maps                           int
		first, steady, reload                 time.Duration
		cpuPct, usPerProgScan, rssMB, kbPerEx float64
		series, churned                       int
	}
	var rows []row
	for _, n := range sizes {
		node := fmt.Sprintf("scale-%d", n)
		func() {
			nd := newScaleNode(t, n)
			defer nd.close()
			closeMaps := pinnedMaps(t, 3*n)
			defer closeMaps()
			started := time.Now()
			a := startAgentBin(t, bpfleetBin, []string{"OTEL_METRIC_EXPORT_INTERVAL=", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=" + proxy.url + "/v1/metrics", "OTEL_TRACES_EXPORTER=none", "K8S_NODE_NAME=" + node},
				"--interval", "10s", "--max-programs", "1000", "--metrics-level", "workload")
			defer a.stop(t)
			q := func(expr string) float64 {
				ss, err := prom.Query(context.Background(), expr)
				if err != nil || len(ss) != 1 {
					return -1
				}
				return ss[0].Value
			}
			hist := func() (count, sum float64) {
				return q(fmt.Sprintf(`bpf_agent_scan_duration_seconds_count{instance=%q}`, node)), q(fmt.Sprintf(`bpf_agent_scan_duration_seconds_sum{instance=%q}`, node))
			}
			r := row{progs: n, maps: 3 * n}
			// The first scan: the histogram's first point (one scan when
			// the first export follows it, as it does; the mean of the
			// scans it holds otherwise).
			for {
				c, s := hist()
				if c >= 1 {
					r.first = time.Duration(s / c * float64(time.Second))
					break
				}
				if time.Since(started) > 3*time.Minute {
					t.Fatalf("%s: no scan in Prometheus within 3 min:\n%s", node, a.out.String())
				}
				time.Sleep(time.Second)
			}
			// Warm-up: calibration and the first owner walks.
			time.Sleep(25 * time.Second)
			pid := a.cmd.Process.Pid
			c0, s0 := hist()
			cpu0, bytes0, exports0, t0 := schedCPU(t, pid), proxy.bytes.Load(), proxy.requests.Load(), time.Now()
			// Owners that come and go through the window: a process
			// holding 20 programs replaced every interval.
			churn := startOwnerChurn(t, 20, 10*time.Second)
			time.Sleep(window)
			r.churned = churn.close()
			c1, s1 := hist()
			cpu1, bytes1, exports1, el := schedCPU(t, pid), proxy.bytes.Load(), proxy.requests.Load(), time.Since(t0)
			if c1 <= c0 {
				t.Fatalf("%s: no scan in the %v window", node, window)
			}
			scans := c1 - c0
			r.steady = time.Duration((s1 - s0) / scans * float64(time.Second))
			r.cpuPct = 100 * (cpu1 - cpu0).Seconds() / el.Seconds()
			r.usPerProgScan = float64((cpu1 - cpu0).Microseconds()) / scans / float64(n)
			if ex := exports1 - exports0; ex > 0 {
				r.kbPerEx = float64(bytes1-bytes0) / 1000 / float64(ex)
			}
			rss, _ := procStat(t, pid)
			r.rssMB = float64(rss) / 1000
			r.series = int(q(fmt.Sprintf(`count({instance=%q})`, node)))
			// 50 programs reloaded: the next scan sees 50 new ids and walks
			// owners again.
			nd.reload(t, 50)
			for deadline := time.Now().Add(time.Minute); ; {
				c2, s2 := hist()
				if c2 > c1 {
					r.reload = time.Duration((s2 - s1) / (c2 - c1) * float64(time.Second))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: no scan within a minute of the reloads", node)
				}
				time.Sleep(time.Second)
			}
			t.Logf("BENCH scale %d programs, %d maps: first scan %v, steady scan %v, scan after 50 reloads %v; CPU %.4f%% of one core, %.2f µs per program per scan (%d owner processes with 20 programs each came and went); RSS %.1f MB; %d series; %.1f kB per export",
				n, 3*n, r.first.Round(time.Microsecond), r.steady.Round(time.Microsecond), r.reload.Round(time.Microsecond), r.cpuPct, r.usPerProgScan, r.churned, r.rssMB, r.series, r.kbPerEx)
			rows = append(rows, r)
		}()
	}
	if len(rows) == 0 {
		return
	}
	// RSS per program at each size holds the agent's fixed part too; the
	// kB each added program costs (from the size before) is its growth.
	b := rows[0]
	t.Logf("BENCH scale | programs | maps | first scan | scan in the window (owners churning) | after 50 reloads | CPU %% of a core | µs/program/scan (× %d) | RSS MB | kB per added program | series | kB/export |", b.progs)
	for i, r := range rows {
		added := "-"
		if i > 0 {
			p := rows[i-1]
			added = fmt.Sprintf("%.1f", 1000*(r.rssMB-p.rssMB)/float64(r.progs-p.progs))
		}
		t.Logf("BENCH scale | %d | %d | %v | %v | %v | %.4f | %.2f (%.2f×) | %.1f | %s | %d | %.1f |",
			r.progs, r.maps, r.first.Round(time.Millisecond), r.steady.Round(100*time.Microsecond), r.reload.Round(100*time.Microsecond), r.cpuPct,
			r.usPerProgScan, r.usPerProgScan/b.usPerProgScan, r.rssMB, added, r.series, r.kbPerEx)
	}
}

// pinnedMaps makes n maps as benchMaps does, pins each under a bpffs
// directory of its own and closes its fd; the returned func unpins them.
func pinnedMaps(t *testing.T, n int) func() {
	t.Helper()
	dir, err := os.MkdirTemp("/sys/fs/bpf", "bpfleet-scale-")
	if err != nil {
		t.Fatalf("a bpffs directory for the maps: %v", err)
	}
	unpin := func() { _ = os.RemoveAll(dir) }
	for i := range n {
		m, err := newBenchMap(i)
		if err != nil {
			unpin()
			t.Fatalf("creating map %d of %d: %v", i, n, err)
		}
		err = m.Pin(filepath.Join(dir, strconv.Itoa(i)))
		m.Close()
		if err != nil {
			unpin()
			t.Fatalf("pinning map %d: %v", i, err)
		}
	}
	return unpin
}

// scaleNode is one size's programs: unattached socket filters sharing 200
// names, cgroup_skb programs linked in pairs (ingress, egress) to a cgroup
// per pod under one parent, tcx programs
// on veths (a tcx hook holds at most 63 programs: each end's ingress and
// egress take 63 each), and XDP on both ends of the first.
type scaleNode struct {
	fl     *fleetLoad
	links  []link.Link
	progs  []*ebpf.Program
	cgroup string // the pods' parent
	veths  []string
}

func newScaleNode(t *testing.T, n int) *scaleNode {
	t.Helper()
	attached := n / 20
	nd := &scaleNode{fl: &fleetLoad{progs: make([]*ebpf.Program, 0, n-2*attached-2)}}
	ok := false
	defer func() {
		if !ok {
			nd.close()
		}
	}()
	for i := range cap(nd.fl.progs) {
		p, err := loadFleetProgram(i % 200)
		if err != nil {
			t.Fatalf("loading program %d: %v", i, err)
		}
		nd.fl.progs = append(nd.fl.progs, p)
	}
	root, err := owners.CgroupV2Mount()
	if err != nil {
		t.Fatalf("the cgroup programs need cgroup v2: %v", err)
	}
	nd.cgroup = filepath.Join(root, fmt.Sprintf("bpfleet-scale-%d", os.Getpid()))
	if err := os.Mkdir(nd.cgroup, 0o755); err != nil {
		t.Fatalf("creating a cgroup for the cgroup programs: %v", err)
	}
	for k := range (attached + 1) / 2 {
		if err := os.Mkdir(filepath.Join(nd.cgroup, fmt.Sprintf("pod%d", k)), 0o755); err != nil {
			t.Fatalf("creating a pod cgroup: %v", err)
		}
	}
	// Four tcx hooks per veth pair (two ends, two directions), 63
	// programs each (the kernel's TCX_MAX_ENTRIES).
	const tcxMax = 63
	pairs := (attached + 4*tcxMax - 1) / (4 * tcxMax)
	var ifaces []string
	var idx []int
	for k := range pairs {
		name := fmt.Sprintf("bfs%d_%d", os.Getpid()%10000, k)
		if err := nettest.AddVeth(name, name+"p", os.Getpid()); err != nil {
			t.Fatal(err)
		}
		nd.veths = append(nd.veths, name)
		for _, end := range []string{name, name + "p"} {
			ifc, err := net.InterfaceByName(end)
			if err != nil {
				t.Fatal(err)
			}
			ifaces = append(ifaces, end)
			idx = append(idx, ifc.Index)
		}
	}
	load := func(name string, typ ebpf.ProgramType, at ebpf.AttachType, ret int64) *ebpf.Program {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: typ, AttachType: at, License: "MIT",
			Instructions: asm.Instructions{asm.LoadImm(asm.R0, ret, asm.DWord), asm.Return()}})
		if err != nil {
			t.Fatalf("loading %s: %v", name, err)
		}
		nd.progs = append(nd.progs, p)
		return p
	}
	for i := range attached {
		at := ebpf.AttachCGroupInetIngress
		if i%2 == 1 {
			at = ebpf.AttachCGroupInetEgress
		}
		p := load(fmt.Sprintf("cg_pod_%03d", i%100), ebpf.CGroupSKB, at, 1)
		l, err := link.AttachCgroup(link.CgroupOptions{Path: filepath.Join(nd.cgroup, fmt.Sprintf("pod%d", i/2)), Attach: at, Program: p})
		if err != nil {
			t.Fatalf("attaching cgroup program %d: %v", i, err)
		}
		nd.links = append(nd.links, l)
		hook, dir := i/tcxMax/2, ebpf.AttachTCXIngress
		if i/tcxMax%2 == 1 {
			dir = ebpf.AttachTCXEgress
		}
		p = load(fmt.Sprintf("tcx_ep_%03d", i%100), ebpf.SchedCLS, dir, -1 /* TCX_NEXT */)
		l, err = link.AttachTCX(link.TCXOptions{Interface: idx[hook], Program: p, Attach: dir})
		if err != nil {
			t.Fatalf("attaching tcx program %d: %v", i, err)
		}
		nd.links = append(nd.links, l)
	}
	for i, ix := range idx[:2] {
		p := load(fmt.Sprintf("xdp_ep_%d", i), ebpf.XDP, ebpf.AttachXDP, 2 /* XDP_PASS */)
		l, err := link.AttachXDP(link.XDPOptions{Program: p, Interface: ix})
		if err != nil {
			t.Fatalf("attaching XDP to %s: %v", ifaces[i], err)
		}
		nd.links = append(nd.links, l)
	}
	ok = true
	return nd
}

// reload replaces k unattached programs (new ids, same names): a workload
// restarting.
func (nd *scaleNode) reload(t *testing.T, k int) { nd.fl.reload(t, k) }

func (nd *scaleNode) close() {
	for _, l := range nd.links {
		l.Close()
	}
	for _, p := range nd.progs {
		p.Close()
	}
	nd.fl.close()
	for _, name := range nd.veths {
		if ifc, err := net.InterfaceByName(name); err == nil {
			// struct ifinfomsg with the index: RTM_DELLINK takes both ends.
			msg := make([]byte, 16)
			binary.NativeEndian.PutUint32(msg[4:], uint32(ifc.Index))
			_ = nettest.Request(unix.RTM_DELLINK, 0, msg)
		}
	}
	if nd.cgroup != "" {
		pods, _ := filepath.Glob(filepath.Join(nd.cgroup, "pod*"))
		for _, d := range pods {
			_ = os.Remove(d)
		}
		_ = os.Remove(nd.cgroup)
	}
}

// ownerChurn is a pod's loader coming and going on the node: every period
// a new process starts holding k programs of its own (new ids, no other
// holder) and the one before it exits, its programs with it. The agent sees
// new programs with a new owner, and an owner process gone, each round.
type ownerChurn struct {
	stop   chan struct{}
	done   chan struct{}
	rounds int
}

func startOwnerChurn(t *testing.T, k int, period time.Duration) *ownerChurn {
	t.Helper()
	c := &ownerChurn{stop: make(chan struct{}), done: make(chan struct{})}
	spec := &ebpf.ProgramSpec{Name: "churn_owner", Type: ebpf.SocketFilter, License: "MIT",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()}}
	start := func() (*exec.Cmd, error) {
		files := make([]*os.File, 0, k)
		defer func() {
			for _, f := range files {
				f.Close() // the child has its own copies
			}
		}()
		for range k {
			p, err := ebpf.NewProgram(spec)
			if err != nil {
				return nil, err
			}
			fd, err := unix.Dup(p.FD())
			p.Close()
			if err != nil {
				return nil, err
			}
			files = append(files, os.NewFile(uintptr(fd), "prog"))
		}
		cmd := exec.Command("sleep", "3600")
		cmd.ExtraFiles = files
		return cmd, cmd.Start()
	}
	go func() {
		defer close(c.done)
		var prev *exec.Cmd
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			next, err := start()
			if err != nil {
				t.Errorf("owner churn: %v", err)
				return
			}
			if prev != nil {
				prev.Process.Kill()
				prev.Wait()
			}
			prev = next
			c.rounds++
			select {
			case <-c.stop:
				prev.Process.Kill()
				prev.Wait()
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// close stops the churn and returns how many owner processes it started.
func (c *ownerChurn) close() int {
	close(c.stop)
	<-c.done
	return c.rounds
}
