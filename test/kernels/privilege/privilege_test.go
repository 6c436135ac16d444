package privilege

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/bpfleet/bpfleet/probes/features"
	"github.com/bpfleet/bpfleet/test/kernels/expect"
	"github.com/bpfleet/bpfleet/test/nettest"
)

// The test re-executes its own binary: stage restrict sets up the
// privileges and execs stage report, which runs the agent and prints a
// report; stage holder keeps a network namespace with an XDP program that
// no process holds.
const (
	stageEnv     = "BPFLEET_PRIV_STAGE"
	capsEnv      = "BPFLEET_PRIV_CAPS" // comma separated, or "all"
	mountsEnv    = "BPFLEET_PRIV_MOUNTS"
	netnsEnv     = "BPFLEET_PRIV_NETNS"
	calibrateEnv = "BPFLEET_PRIV_CALIBRATE"
	fixturesEnv  = "BPFLEET_PRIV_FIXTURES" // JSON of fixtures
)

func TestMain(m *testing.M) {
	switch os.Getenv(stageEnv) {
	case "restrict":
		restrict() // execs the report stage
	case "report":
		if err := json.NewEncoder(os.Stdout).Encode(runReport()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	case "holder":
		holdXDP()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var capBits = map[string]int{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "SYS_ADMIN": unix.CAP_SYS_ADMIN,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYSLOG": unix.CAP_SYSLOG, "PERFMON": unix.CAP_PERFMON, "BPF": unix.CAP_BPF,
}

// restrict runs in a child with every privilege: it enters the fixtures'
// network namespace, and unless the child is the reference (caps "all")
// gives itself the pod's mounts and capabilities, then execs the report
// stage. Capabilities, no_new_privs and namespaces are per thread: all of
// it happens on the one locked thread that calls execve, whose credentials
// the new image inherits (as root: permitted = effective = bounding set).
func restrict() {
	runtime.LockOSThread()
	die := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "privilege: %s: %v\n", what, err)
		os.Exit(3)
	}
	if ns := os.Getenv(netnsEnv); ns != "" {
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			die("opening the fixtures' network namespace", err)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			die("entering the fixtures' network namespace", err)
		}
		unix.Close(fd)
	}
	if caps := os.Getenv(capsEnv); caps != "all" {
		if err := podMounts(strings.Split(os.Getenv(mountsEnv), ",")); err != nil {
			die("setting up the pod's mounts", err)
		}
		if err := dropCaps(strings.Split(caps, ",")); err != nil {
			die("dropping capabilities", err)
		}
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, stageEnv+"=") })
	exe, err := os.Executable()
	if err != nil {
		die("finding the test binary", err)
	}
	die("exec", syscall.Exec(exe, os.Args, append(env, stageEnv+"=report")))
}

// podMounts gives this thread a mount namespace like the pod's: debugfs
// and tracefs gone unless listed, the listed host paths read-only.
func podMounts(keep []string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	for _, p := range []string{"/sys/kernel/debug/tracing", "/sys/kernel/debug", "/sys/kernel/tracing"} {
		if !slices.Contains(keep, p) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				return fmt.Errorf("unmounting %s: %w", p, err)
			}
		}
	}
	for _, p := range keep {
		if p == "" {
			continue
		}
		// Read-only for this mount only, as a read-only hostPath is; a path
		// the host does not have is not mounted in the pod either.
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("remounting %s read-only: %w", p, err)
		}
	}
	return nil
}

func dropCaps(keep []string) error {
	keepBits := map[int]bool{}
	for _, c := range keep {
		b, ok := capBits[c]
		if !ok {
			return fmt.Errorf("unknown capability %q", c)
		}
		keepBits[b] = true
	}
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if !keepBits[c] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
	}
	// No inheritable or ambient capability may carry more across execve.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return err
	}
	// allowPrivilegeEscalation: false
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

// fixtures are programs of the kinds a node runs, loaded by the test with
// every privilege: one held by the test process (owner: its pid) and
// pinned in a bpffs directory only another user may read, a
// cgroup_device program attached to a cgroup and held by nobody (as runc
// attaches one to every container's cgroup), an XDP program attached to
// an interface and held by nobody.
type fixtures struct {
	Holder     int    `json:"holder"` // the pid holding Held
	Held       uint32 `json:"held"`
	Pin        string `json:"pin"` // where Held is pinned, in a directory of another user's
	Cgroup     uint32 `json:"cgroup"`
	CgroupPath string `json:"cgroup_path"`
	XDP        uint32 `json:"xdp"`
}

// Report is what one child's agent could do: each feature with "" when it
// works and why not otherwise.
type Report struct {
	CapEff   string            `json:"cap_eff"`
	Err      string            `json:"err,omitempty"` // agent.New or Scan failed
	Features map[string]string `json:"features"`
	Degraded []string          `json:"degraded"`
	// HostNetns is the kernel's answer to the agent's process statting
	// pid 1's network namespace, as the agent does ("" when allowed).
	HostNetns string `json:"host_netns,omitempty"`
}

func runReport() (r Report) {
	r.Features = map[string]string{}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
				r.CapEff = strings.TrimSpace(v)
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/1/ns/net", &st); err != nil {
		r.HostNetns = err.Error()
	}
	var fx fixtures
	if err := json.Unmarshal([]byte(os.Getenv(fixturesEnv)), &fx); err != nil {
		r.Err = "decoding fixtures: " + err.Error()
		return r
	}
	_ = rlimit.RemoveMemlock()
	// As the chart runs it: stats held, owners from the task_file iterator
	// (hostPID: procfs at /proc is the host's).
	a, err := agent.New(agent.Config{StatsMode: agent.StatsAlways, Owners: true, OwnerIterator: true})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer a.Close()
	ctx := context.Background()
	scan := func() *agent.Snapshot {
		s, err := a.Scan(ctx)
		if err != nil {
			r.Err = "scan: " + err.Error()
		}
		return s
	}
	var snap *agent.Snapshot
	for range 3 {
		if snap = scan(); snap == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	if os.Getenv(calibrateEnv) == "1" {
		// What bpfleet probe asks: each attach type loaded, attached and
		// triggered in both modes, as the calibration needs.
		for _, t := range catalog.All() {
			for _, m := range []catalog.Mode{catalog.Syscall, catalog.Kernel} {
				r.Features[fmt.Sprintf("attach %s (%s)", t, m)] = features.Reason(features.HaveAttachType(t, m))
			}
		}
	}
	// The agent's own calibration under its start-up budget, as the chart
	// runs it; under TCG the budget is spent after an attach type or two,
	// so in the matrix the probes above answer for it.
	if os.Getenv(calibrateEnv) == "1" && expect.Entry() == "" {
		cal, err := a.Calibrate(ctx, 3*time.Second)
		if err != nil {
			r.Err = "calibrate: " + err.Error()
		}
		for _, c := range cal {
			r.Features[agent.FeatureCalibration+" "+c.AttachType] = why(c.Supported, c.Reason)
		}
		if snap = scan(); snap == nil {
			return r
		}
	}
	r.Degraded = snap.Degraded
	prog := func(id uint32) *agent.ProgramStat {
		for _, p := range snap.Programs {
			if p.ID == id {
				return p
			}
		}
		return nil
	}
	f := r.Features
	f[agent.FeatureStats] = why(snap.Stats.HeldByAgent, "no BPF_ENABLE_STATS fd: "+snap.Stats.Error)
	f[agent.FeatureProgIterator] = why(snap.Scan.Source == agent.ScanSourceIterator, snap.Scan.FallbackReason)
	f[agent.FeatureLinkIterator] = why(snap.Scan.LinksSource == agent.ScanSourceIterator, snap.Scan.LinksFallbackReason)
	steady, detail := a.SteadyRead()
	f[agent.FeatureSteadyRead] = why(steady, detail)
	held, cg, xdp := prog(fx.Held), prog(fx.Cgroup), prog(fx.XDP)
	f[agent.FeatureFacts] = why(held != nil && held.Sleepable != nil, "the held program has no sleepable flag")
	f[agent.FeatureOwners] = why(held != nil && slices.ContainsFunc(held.Owners, func(o agent.Owner) bool { return o.PID == fx.Holder && o.Exe != "" }),
		fmt.Sprintf("the program held by pid %d has no such owner with its executable", fx.Holder))
	f[agent.FeaturePins] = why(held != nil && slices.Contains(held.Pins, fx.Pin), "the program pinned at "+fx.Pin+" has no such pin")
	f[agent.FeatureCgroupAttach] = why(cg != nil && cg.AttachType == "cgroup_device" && strings.HasSuffix(cg.AttachTarget, fx.CgroupPath),
		fmt.Sprintf("the cgroup_device program on %s is not attributed to it", fx.CgroupPath))
	f[agent.FeatureNetdevAttach] = why(xdp != nil && strings.HasPrefix(xdp.AttachType, "xdp"), "the XDP program on lo is not attributed to it")
	return r
}

// why is a feature's report: "" when it works, else why not.
func why(ok bool, reason string) string {
	if ok {
		return ""
	}
	if reason == "" {
		return "unavailable"
	}
	return reason
}

// holdXDP runs in a child in a network namespace of its own: it attaches
// an XDP program to its loopback by netlink and closes the program (the
// interface holds it), says the program's id on stdout and keeps the
// namespace until stdin closes.
func holdXDP() {
	fail := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	_ = rlimit.RemoveMemlock()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()}})
	if err != nil {
		fail(err)
	}
	info, err := p.Info()
	if err != nil {
		fail(err)
	}
	id, _ := info.ID()
	if err := nettest.SetXDP(1, p.FD()); err != nil {
		fail(fmt.Errorf("attaching XDP to lo: %w", err))
	}
	p.Close()
	fmt.Printf("ready %d\n", id)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

func setUp(t *testing.T) (fixtures, string) {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	fx := fixtures{Holder: os.Getpid()}
	held, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "priv_held", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		t.Fatalf("loading a socket filter: %v", err)
	}
	t.Cleanup(func() { held.Close() })
	fx.Held = progID(t, held)
	pinDir := fmt.Sprintf("/sys/fs/bpf/bpfleet-privilege-%d", os.Getpid())
	if err := os.Mkdir(pinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pinDir) })
	fx.Pin = pinDir + "/held"
	if err := held.Pin(fx.Pin); err != nil {
		t.Fatalf("pinning: %v", err)
	}
	// nobody's: root without CAP_DAC_READ_SEARCH may not list it
	if err := os.Chown(pinDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}

	root, err := owners.CgroupV2Mount()
	if err != nil {
		// The kernel-matrix guests mount no cgroup2 of their own.
		root = t.TempDir()
		if err := unix.Mount("cgroup2", root, "cgroup2", 0, ""); err != nil {
			t.Fatalf("mounting cgroup2: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	}
	fx.CgroupPath = fmt.Sprintf("/bpfleet-privilege-%d", os.Getpid())
	dir := root + fx.CgroupPath
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Removing the cgroup detaches its program.
	t.Cleanup(func() { _ = os.Remove(dir) })
	dev, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "priv_dev", Type: ebpf.CGroupDevice, AttachType: ebpf.AttachCGroupDevice, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}})
	if err != nil {
		t.Fatalf("loading a cgroup_device program: %v", err)
	}
	fx.Cgroup = progID(t, dev)
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{Target: dfd, Program: dev, Attach: ebpf.AttachCGroupDevice})
	unix.Close(dfd)
	dev.Close() // the cgroup holds it, as runc's
	if err != nil {
		t.Fatalf("attaching cgroup_device to %s: %v", dir, err)
	}

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), stageEnv+"=holder")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the namespace holder: %v", err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("namespace holder: %v", err)
	}
	if _, err := fmt.Sscanf(line, "ready %d", &fx.XDP); err != nil {
		t.Fatalf("namespace holder: %s", strings.TrimSpace(line))
	}
	return fx, fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
}

func progID(t *testing.T, p *ebpf.Program) uint32 {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("program info has no id")
	}
	return uint32(id)
}

// run runs the agent in a child with caps ("all": every privilege, no
// mount hidden) and returns its report.
func run(t *testing.T, fx fixtures, netns string, caps []string, calibrate bool) Report {
	t.Helper()
	b, err := json.Marshal(fx)
	if err != nil {
		t.Fatal(err)
	}
	cal := "0"
	if calibrate {
		cal = "1"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), stageEnv+"=restrict", capsEnv+"="+strings.Join(caps, ","),
		mountsEnv+"="+strings.Join(ChartHostMounts, ","), netnsEnv+"="+netns, calibrateEnv+"="+cal, fixturesEnv+"="+string(b))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("agent child with %v: %v\n%s", caps, err, stderr.String())
	}
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("agent child with %v: decoding its report: %v\n%s", caps, err, stdout.String())
	}
	return r
}

// lost lists the features that work in ref and not in r, with r's reason.
func lost(ref, r Report) []string {
	var out []string
	for f, why := range ref.Features {
		if got, ok := r.Features[f]; why == "" && ok && got != "" {
			out = append(out, f+" ("+got+")")
		}
	}
	slices.Sort(out)
	return out
}

// named says whether a Degraded line names feature.
func named(degraded []string, feature string) bool {
	return slices.ContainsFunc(degraded, func(d string) bool { return strings.HasPrefix(d, feature+": ") })
}

func TestChartPrivileges(t *testing.T) {
	fx, netns := setUp(t)

	full := run(t, fx, netns, []string{"all"}, true)
	if full.Err != "" {
		t.Fatalf("the agent with every privilege: %s", full.Err)
	}
	for _, f := range slices.Sorted(maps.Keys(full.Features)) {
		if why := full.Features[f]; why != "" {
			t.Logf("not on this kernel even with every privilege: %s: %s", f, why)
		}
	}
	chart := run(t, fx, netns, ChartCapabilities, true)
	t.Logf("the chart's capabilities %v: CapEff %s; pid 1's network namespace: %q (every privilege: %q)", ChartCapabilities, chart.CapEff, chart.HostNetns, full.HostNetns)
	if chart.Err != "" {
		t.Fatalf("the agent with the chart's privileges does not run: %s", chart.Err)
	}
	if l := lost(full, chart); len(l) > 0 {
		t.Errorf("the chart's privileges lose what the kernel allows as root (add the privilege to the chart):\n\t%s", strings.Join(l, "\n\t"))
	}
	for _, l := range lost(full, chart) {
		if f, _, _ := strings.Cut(l, " ("); !strings.HasPrefix(f, "attach ") && !named(chart.Degraded, f) {
			t.Errorf("lost %s with the chart's privileges, and no Degraded line says so: %q", f, chart.Degraded)
		}
	}

	// What each capability of the chart is for on this kernel.
	for _, c := range ChartCapabilities {
		t.Run("without_"+c, func(t *testing.T) {
			r := run(t, fx, netns, slices.DeleteFunc(slices.Clone(ChartCapabilities), func(x string) bool { return x == c }), false)
			if r.Err != "" {
				if strings.Contains(r.Err, "\n") {
					t.Errorf("without CAP_%s the agent refuses to start, in more than one line: %q", c, r.Err)
				}
				t.Logf("without CAP_%s the agent does not start: %s", c, r.Err)
				return
			}
			// The agent runs in the fixtures' network namespace, not the
			// host's: a refused read of pid 1's (whatever refused it) leaves
			// it reading its own interfaces, and Degraded must say so.
			if r.HostNetns != "" {
				t.Logf("without CAP_%s the kernel refuses the agent pid 1's network namespace: %s", c, r.HostNetns)
				if !named(r.Degraded, agent.FeatureNetdevAttach) {
					t.Errorf("without CAP_%s the kernel refused pid 1's network namespace (%s), and no Degraded line says so: %q", c, r.HostNetns, r.Degraded)
				}
			}
			l := lost(chart, r)
			if len(l) == 0 {
				t.Logf("without CAP_%s: nothing lost on this kernel", c)
			}
			for _, x := range l {
				t.Logf("without CAP_%s: loses %s", c, x)
				if f, _, _ := strings.Cut(x, " ("); !named(r.Degraded, f) {
					t.Errorf("without CAP_%s the agent loses %s, and no Degraded line says so: %q", c, f, r.Degraded)
				}
			}
		})
	}
}
