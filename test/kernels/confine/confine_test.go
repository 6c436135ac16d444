package confine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/test/nettest"
)

// The test re-executes its own binary: stage holder holds the fixtures,
// stage exec puts itself in a network namespace of its own and under a
// profile and execs the command in argvEnv, stage probe (run through
// exec) tries the single operations the agent depends on.
const (
	stageEnv  = "BPFLEET_CONFINE_STAGE"
	argvEnv   = "BPFLEET_CONFINE_ARGV" // JSON []string
	labelEnv  = "BPFLEET_CONFINE_PROFILE"
	holderEnv = "BPFLEET_CONFINE_HOLDER" // pid,held prog id,pin dir
)

const (
	bpfleet  = "/bin/bpfleet"
	aaprof   = "/bin/aaprofile"
	pinDir   = "/sys/fs/bpf/confine"
	heldPin  = pinDir + "/held"
	unconfin = "unconfined"
)

func TestMain(m *testing.M) {
	switch os.Getenv(stageEnv) {
	case "holder":
		hold()
		os.Exit(0)
	case "exec":
		confinedExec()
	case "probe":
		json.NewEncoder(os.Stdout).Encode(probe())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// confinedExec runs on one locked thread: AppArmor's exec transition and
// the network namespace are the thread's, and execve carries both into
// the new image.
func confinedExec() {
	runtime.LockOSThread()
	die := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "confine: %s: %v\n", what, err)
		os.Exit(3)
	}
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(argvEnv)), &argv); err != nil {
		die("reading argv", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		die("entering a network namespace of its own", err)
	}
	if p := os.Getenv(labelEnv); p != unconfin {
		// The exec transition: the profile applies from the next execve.
		// attr/apparmor/ is AppArmor's own directory since Linux 5.8; the
		// shared attr/exec is the older interface.
		err := os.WriteFile("/proc/thread-self/attr/apparmor/exec", []byte("exec "+p), 0)
		if err != nil {
			err = os.WriteFile("/proc/thread-self/attr/exec", []byte("exec "+p), 0)
		}
		if err != nil {
			die("asking for profile "+p, err)
		}
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, stageEnv+"=") })
	if stage, ok := strings.CutPrefix(argv[0], "stage:"); ok {
		exe, err := os.Executable()
		if err != nil {
			die("finding the test binary", err)
		}
		argv[0] = exe
		env = append(env, stageEnv+"="+stage)
	}
	die("exec "+argv[0], syscall.Exec(argv[0], argv, env))
}

// hold loads the fixtures as a node's other processes have them: a socket
// filter this process holds and pins, an XDP program attached to the
// host's loopback by netlink that no process holds (the agent, in a
// network namespace of its own as the chart's pod, finds it only by
// entering the host's through /proc/1/ns/net). The XDP program is
// detached when stdin closes.
func hold() {
	fail := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	_ = rlimit.RemoveMemlock()
	held, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "confine_held", Type: ebpf.SocketFilter, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		fail(err)
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		fail(err)
	}
	if err := held.Pin(heldPin); err != nil {
		fail(err)
	}
	xdp, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "confine_xdp", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2 /* XDP_PASS */), asm.Return()}})
	if err != nil {
		fail(err)
	}
	if err := nettest.SetXDP(1, xdp.FD()); err != nil {
		fail(fmt.Errorf("attaching XDP to lo: %w", err))
	}
	fmt.Printf("ready %d %d\n", progID(held), progID(xdp))
	xdp.Close()
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = nettest.SetXDP(1, -1)
	held.Unpin()
	held.Close()
}

func progID(p *ebpf.Program) uint32 {
	info, err := p.Info()
	if err != nil {
		return 0
	}
	id, _ := info.ID()
	return uint32(id)
}

// probe tries, one at a time, the operations the agent's features rest
// on, and says for each "" or the error.
func probe() map[string]string {
	var h struct {
		pid  int
		held uint32
	}
	fmt.Sscanf(os.Getenv(holderEnv), "%d,%d", &h.pid, &h.held)
	out := map[string]string{}
	try := func(name string, f func() error) {
		if err := f(); err != nil {
			out[name] = err.Error()
		} else {
			out[name] = ""
		}
	}
	_ = rlimit.RemoveMemlock()
	proc := func(p string) string { return fmt.Sprintf("/proc/%d/%s", h.pid, p) }
	try("bpf(PROG_GET_NEXT_ID)", func() error { _, err := ebpf.ProgramGetNextID(0); return err })
	try("bpf(PROG_GET_FD_BY_ID) of another process's program", func() error {
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(h.held))
		if err == nil {
			p.Close()
		}
		return err
	})
	try("list another process's /proc/PID/fd", func() error { _, err := os.ReadDir(proc("fd")); return err })
	try("read another process's /proc/PID/fdinfo", func() error { _, err := os.ReadFile(proc("fdinfo/0")); return err })
	try("readlink another process's /proc/PID/exe", func() error { _, err := os.Readlink(proc("exe")); return err })
	try("read another process's /proc/PID/cgroup", func() error { _, err := os.ReadFile(proc("cgroup")); return err })
	try("setns into a pod's netns (/proc/PID/ns/net)", func() error { return setnsIn(proc("ns/net")) })
	try("setns into the host's netns (/proc/1/ns/net)", func() error { return setnsIn("/proc/1/ns/net") })
	try("list bpffs (/sys/fs/bpf)", func() error { _, err := os.ReadDir(pinDir); return err })
	try("pin in bpffs (/sys/fs/bpf)", func() error {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			return err
		}
		defer p.Close()
		if err := p.Pin(pinDir + "/probe"); err != nil {
			return err
		}
		return p.Unpin()
	})
	try("open /sys/kernel/tracing/kprobe_events for writing", func() error {
		f, err := os.OpenFile("/sys/kernel/tracing/kprobe_events", os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	try("perf_event_open (software clock, all tasks on CPU 0)", func() error {
		fd, err := unix.PerfEventOpen(&unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(binary.Size(unix.PerfEventAttr{}))}, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	try("read /sys/kernel/btf/vmlinux", func() error {
		f, err := os.Open("/sys/kernel/btf/vmlinux")
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.Read(make([]byte, 8))
		return err
	})
	try("read /proc/kallsyms", func() error { _, err := os.ReadFile("/proc/kallsyms"); return err })
	try("write /tmp (the CO-RE cache)", func() error { return os.WriteFile("/tmp/confine-probe", []byte("x"), 0o600) })
	try("read /sys/kernel/security/lsm", func() error { _, err := os.ReadFile("/sys/kernel/security/lsm"); return err })
	return out
}

// setnsIn enters the namespace on a thread of its own, which then ends
// with its goroutine (never unlocked), so no other goroutine runs there.
func setnsIn(path string) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		done <- unix.Setns(fd, unix.CLONE_NEWNET)
	}()
	return <-done
}

// run runs argv through the exec stage under profile and returns its
// stdout and stderr. With until, it is stopped by SIGTERM 3 s (scans of
// 1 s) after its stderr shows until, or after a minute.
func run(t *testing.T, profile string, holder string, until string, argv ...string) (string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(argv)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), stageEnv+"=exec", argvEnv+"="+string(a), labelEnv+"="+profile, holderEnv+"="+holder)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		seen := 0
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if until != "" && strings.Contains(sc.Text(), until) {
				if seen++; seen == 1 {
					time.AfterFunc(3*time.Second, func() { cmd.Process.Signal(unix.SIGTERM) })
				}
			}
		}
	}()
	if until != "" {
		time.AfterFunc(time.Minute, func() { cmd.Process.Signal(unix.SIGTERM) })
	}
	err = cmd.Wait()
	pw.Close()
	<-done
	if err != nil && until == "" {
		t.Fatalf("%s under %s: %v\n%s", strings.Join(argv, " "), profile, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}

// listFeatures reads bpfleet list -o json for what the fixtures should
// show: "" when shown, else what is missing.
func listFeatures(t *testing.T, out string, holder int, held, xdp uint32) map[string]string {
	var doc struct {
		Programs []struct {
			ID           uint32          `json:"id"`
			Owners       []agent.Owner   `json:"owners"`
			Pins         []string        `json:"pins"`
			AttachType   string          `json:"attach_type"`
			AttachTarget string          `json:"attach_target"`
			TargetClass  json.RawMessage `json:"target_class"`
		} `json:"programs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("decoding bpfleet list -o json: %v\n%s", err, out)
	}
	f := map[string]string{
		agent.FeatureOwners:       "the held program is not listed",
		"owner exe":               "the held program is not listed",
		agent.FeaturePins:         "the held program is not listed",
		agent.FeatureNetdevAttach: "the XDP program is not listed",
	}
	for _, p := range doc.Programs {
		switch p.ID {
		case held:
			f[agent.FeatureOwners] = why(slices.ContainsFunc(p.Owners, func(o agent.Owner) bool { return o.PID == holder }),
				fmt.Sprintf("no owner pid %d (owners %+v)", holder, p.Owners))
			f["owner exe"] = why(slices.ContainsFunc(p.Owners, func(o agent.Owner) bool { return o.PID == holder && o.Exe != "" }),
				"the holder has no executable")
			f[agent.FeaturePins] = why(slices.Contains(p.Pins, heldPin), fmt.Sprintf("pins %q, not %s", p.Pins, heldPin))
		case xdp:
			f[agent.FeatureNetdevAttach] = why(strings.HasPrefix(p.AttachType, "xdp") && p.AttachTarget != "",
				fmt.Sprintf("attach type %q target %q class %s", p.AttachType, p.AttachTarget, p.TargetClass))
		}
	}
	return f
}

func why(ok bool, reason string) string {
	if ok {
		return ""
	}
	return reason
}

// agentLines are the start line and the degraded lines of bpfleet agent's
// log.
func agentLines(log string) (start string, degraded []string) {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		switch l := sc.Text(); {
		case strings.Contains(l, `msg="agent started"`):
			start = l
		case strings.Contains(l, `msg=degraded`):
			degraded = append(degraded, l)
		}
	}
	return start, degraded
}

func TestContainerdProfile(t *testing.T) {
	lsm, err := os.ReadFile("/sys/kernel/security/lsm")
	if err != nil {
		t.Skipf("AppArmor not active: /sys/kernel/security/lsm: %v", err)
	}
	if !slices.Contains(strings.Split(strings.TrimSpace(string(lsm)), ","), "apparmor") {
		t.Skipf("AppArmor not active: /sys/kernel/security/lsm is %q", strings.TrimSpace(string(lsm)))
	}
	// Debian ships the parser in /usr/sbin since apparmor 4 (merged /usr),
	// in /sbin before (bookworm's 3.0).
	parser := "/usr/sbin/apparmor_parser"
	if _, err := os.Stat(parser); err != nil {
		parser = "/sbin/apparmor_parser"
	}
	for _, p := range []string{parser, bpfleet, aaprof} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: the harness puts it in the guest (test/kernels/confine/guest-deps; bpfleet with -agent)", err)
		}
	}
	// containerd generates the profile where it runs; so does this test.
	prof, err := exec.Command(aaprof, Profile).Output()
	if err != nil {
		t.Fatalf("generating containerd's profile: %v", err)
	}
	path := filepath.Join(t.TempDir(), Profile)
	if err := os.WriteFile(path, prof, 0o644); err != nil {
		t.Fatal(err)
	}
	// -K: no cache; containerd loads it with the same flags (-Kr).
	if out, err := exec.Command(parser, "-Kr", path).CombinedOutput(); err != nil {
		t.Fatalf("apparmor_parser -Kr: %v: %s\nprofile:\n%s", err, out, prof)
	}
	for _, l := range strings.Split(string(prof), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "deny") || strings.HasPrefix(l, "ptrace") || strings.HasPrefix(l, "abi") || strings.HasPrefix(l, "#include") {
			t.Logf("profile: %s", l)
		}
	}

	// The fixtures' holder.
	exe, _ := os.Executable()
	h := exec.Command(exe)
	h.Env = append(os.Environ(), stageEnv+"=holder")
	stdin, _ := h.StdinPipe()
	hout, _ := h.StdoutPipe()
	h.Stderr = os.Stderr
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); h.Wait() })
	line, err := bufio.NewReader(hout).ReadString('\n')
	var held, xdp uint32
	if _, serr := fmt.Sscanf(line, "ready %d %d", &held, &xdp); err != nil || serr != nil {
		t.Fatalf("holder: %q %v", line, err)
	}
	holder := fmt.Sprintf("%d,%d", h.Process.Pid, held)

	// The single operations.
	probes := map[string]map[string]string{}
	for _, p := range []string{unconfin, Profile} {
		out, _ := run(t, p, holder, "", "stage:probe")
		var m map[string]string
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("probe under %s: %v: %q", p, err, out)
		}
		probes[p] = m
	}
	var ops []string
	for op := range probes[unconfin] {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	for _, op := range ops {
		t.Logf("operation %-55s unconfined: %-8s %s: %s", op, ok(probes[unconfin][op]), Profile, ok(probes[Profile][op]))
	}

	// bpfleet list: the features a one-shot scan shows.
	lists := map[string]map[string]string{}
	for _, p := range []string{unconfin, Profile} {
		out, _ := run(t, p, holder, "", bpfleet, "list", "-o", "json")
		lists[p] = listFeatures(t, out, h.Process.Pid, held, xdp)
	}
	var lost []string
	for _, f := range []string{agent.FeatureOwners, "owner exe", agent.FeaturePins, agent.FeatureNetdevAttach} {
		t.Logf("bpfleet list: %-22s unconfined: %-8s %s: %s", f, ok(lists[unconfin][f]), Profile, ok(lists[Profile][f]))
		if lists[unconfin][f] != "" {
			t.Errorf("unconfined, bpfleet list lacks %s: %s", f, lists[unconfin][f])
		} else if lists[Profile][f] != "" {
			lost = append(lost, f)
		}
	}

	// bpfleet agent: its start line and Degraded lines must name the
	// profile and every feature lost under it, and unconfined none.
	for _, p := range []string{unconfin, Profile} {
		_, log := run(t, p, holder, `msg="scan source"`, bpfleet, "agent", "--interval", "1s", "--api-addr=", "--calibrate=false")
		start, degraded := agentLines(log)
		if start == "" {
			t.Fatalf("under %s, bpfleet agent logged no start line:\n%s", p, log)
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, `msg="agent started"`) {
				t.Logf("agent under %s: %s", p, l)
			}
		}
		all := start + "\n" + strings.Join(degraded, "\n")
		if p == unconfin {
			if strings.Contains(all, "AppArmor") {
				t.Errorf("unconfined, the agent names AppArmor:\n%s", all)
			}
			continue
		}
		if !strings.Contains(start, Profile+" (enforce)") {
			t.Errorf("the confined agent's start line does not name %s (enforce): %s", Profile, start)
		}
		var conf string
		for _, d := range degraded {
			if strings.Contains(d, "AppArmor profile "+Profile) {
				conf = d
			}
		}
		for _, f := range lost {
			name := f
			if f == "owner exe" {
				name = agent.FeatureOwners
			}
			if !strings.Contains(conf, name) {
				t.Errorf("lost under %s: %s (%s), but no Degraded line names both: %q", Profile, f, lists[Profile][f], conf)
			}
		}
	}
}

func ok(err string) string {
	if err == "" {
		return "ok"
	}
	return err
}
