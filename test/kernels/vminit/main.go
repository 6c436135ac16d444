// Command vminit is /init of the kernel-matrix VMs: it mounts what BPF
// programs and their tests need, runs every test binary and extra command it
// finds in the initramfs with its output framed by markers on the console,
// and powers the machine off.
//
// The protocol with the harness (test/kernels) is plain lines:
//
//	@@bpfleet-begin <kind> <name>@@
//	...output of the binary (test2json stream for tests)...
//	@@bpfleet-end <kind> <name> exit=<code>@@
//	@@bpfleet-done@@
//
// A missing end or done marker means the guest crashed or hung.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Paths inside the initramfs, shared with the harness.
const (
	testsGlob    = "/tests/*.test"
	commandsFile = "/bpfleet/commands" // one command per line, fields split on spaces
	entryFile    = "/bpfleet/entry"    // the matrix entry name
	envFile      = "/bpfleet/env"      // KEY=value lines added to the environment
	testArgsFile = "/bpfleet/testargs" // flags added to each test binary's, one a line
	// netFile, present when the harness asked for networking: "addr
	// A.B.C.D/N" for eth0 and "modules PATH..." to load first, in order.
	netFile     = "/bpfleet/net"
	testTimeout = "10m"
)

var console = os.Stdout

func main() {
	if err := setupConsole(); err != nil {
		fmt.Fprintln(os.Stderr, "vminit: console:", err)
	}
	for _, err := range mountAll() {
		fmt.Fprintln(console, "vminit:", err)
	}
	// BPF maps count against RLIMIT_MEMLOCK on kernels before 5.11 and on
	// kernels without memcg accounting; lift it as the agent's deployments do.
	inf := &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, inf); err != nil {
		fmt.Fprintln(console, "vminit: memlock rlimit:", err)
	}
	env := []string{"PATH=/bin", "HOME=/", "TMPDIR=/tmp"}
	if b, err := os.ReadFile(entryFile); err == nil {
		env = append(env, "BPFLEET_KTEST_ENTRY="+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile(envFile); err == nil {
		env = append(env, strings.Fields(string(b))...)
	}
	if b, err := os.ReadFile(netFile); err == nil {
		// The tests that asked for a network fail on their own when it is
		// missing; this line says why.
		if err := setupNet(string(b)); err != nil {
			fmt.Fprintln(console, "vminit: network:", err)
		}
	}

	// A flag given twice takes its last value: the harness's -count
	// replaces the default count.
	args := []string{"-test.v=test2json", "-test.timeout=" + testTimeout, "-test.count=1"}
	if b, err := os.ReadFile(testArgsFile); err == nil {
		args = append(args, strings.Fields(string(b))...)
	}
	tests, _ := filepath.Glob(testsGlob)
	sort.Strings(tests)
	for _, t := range tests {
		run("test", filepath.Base(t), env, t, args...)
	}
	// The commands run under the limit a node without a raised one gives
	// (64 KiB, the kernel's default before 5.16): on kernels that charge
	// BPF memory to RLIMIT_MEMLOCK (before 5.11) a command that loads
	// anything must lift it itself, as bpfleet's do (raiseMemlock), and
	// one that does not fails here rather than on such a node.
	def := &unix.Rlimit{Cur: 64 << 10, Max: 64 << 10}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, def); err != nil {
		fmt.Fprintln(console, "vminit: memlock rlimit for the commands:", err)
	}
	for _, argv := range readCommands() {
		path := argv[0]
		if !strings.Contains(path, "/") {
			path = "/bin/" + path // init has no PATH to search
		}
		run("cmd", strings.Join(argv, " "), env, path, argv[1:]...)
	}
	fmt.Fprintln(console, "\n@@bpfleet-done@@")
	unix.Sync()
	// Give the UART time to drain before the machine disappears.
	time.Sleep(200 * time.Millisecond)
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintln(console, "vminit: power off:", err)
	}
	select {}
}

// setupConsole makes sure output reaches the serial console even when the
// kernel found no /dev/console in the initramfs.
func setupConsole() error {
	if _, err := unix.FcntlInt(1, unix.F_GETFD, 0); err == nil {
		return nil
	}
	_ = os.MkdirAll("/dev", 0o755)
	_ = unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	f, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	for fd := 0; fd <= 2; fd++ {
		_ = unix.Dup2(int(f.Fd()), fd)
	}
	return nil
}

func mountAll() []error {
	mounts := []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"},
		{"bpf", "/sys/fs/bpf", "bpf"},
		{"tracefs", "/sys/kernel/tracing", "tracefs"},
		{"debugfs", "/sys/kernel/debug", "debugfs"},
		// The LSMs' files: which are active (lsm), and AppArmor's policy
		// interface, which apparmor_parser loads profiles through.
		{"securityfs", "/sys/kernel/security", "securityfs"},
	}
	var errs []error
	for _, m := range mounts {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("mkdir %s: %w", m.dst, err))
			continue
		}
		err := unix.Mount(m.src, m.dst, m.fstype, 0, "")
		if err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err))
		}
	}
	return errs
}

func readCommands() [][]string {
	f, err := os.Open(commandsFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 && !strings.HasPrefix(fields[0], "#") {
			out = append(out, fields)
		}
	}
	return out
}

// run executes one binary with its output going straight to the console,
// framed by markers.
func run(kind, name string, env []string, path string, args ...string) {
	fmt.Fprintf(console, "\n@@bpfleet-begin %s %s@@\n", kind, name)
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.Stdout = console
	cmd.Stderr = console
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			fmt.Fprintf(console, "vminit: running %s: %v\n", path, err)
			code = -1
		}
	}
	fmt.Fprintf(console, "\n@@bpfleet-end %s %s exit=%d@@\n", kind, name, code)
}
