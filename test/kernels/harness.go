package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options say what to run in each VM.
type Options struct {
	Packages []string      // Go test packages built as /tests/<name>.test (module-relative, ./...)
	Tags     string        // build tags for the test binaries
	Commands []string      // extra commands run after the tests, e.g. "bpfleet probe -o json"
	Timeout  time.Duration // wall-clock limit of one boot
	WorkDir  string        // build outputs and console logs
	// LogLevel is the guest console's loglevel (default 2: emergencies
	// and alerts only); 7 shows the stacks of a soft lockup or a warning.
	LogLevel int
	// Silence is how long a guest may print nothing before it counts as
	// hung and is stopped (default 2 min). The longest quiet stretch of a
	// healthy run is a bench command's rounds, well under a minute.
	Silence time.Duration
	// Net gives each guest a NIC on qemu's user-mode network: vminit
	// loads the kernel's virtio-net modules and sets eth0 up, and the
	// host's loopback is reachable at guestHostAddr (exporter/e2e's
	// guest test sends the guest agent's exports to backends there).
	Net bool
	// Env is added to the environment of the tests and commands in the
	// guest (KEY=value each).
	Env []string
	// TestArgs are added to every guest test binary's flags
	// (-test.run=REGEXP, -test.count=N): one scenario run many times.
	TestArgs []string
	// Agent puts bpfleet in the guest (/bin/bpfleet) even with no
	// Commands, for tests that run it.
	Agent bool
	Logf  func(string, ...any)
}

// The addresses of qemu's user-mode network (its defaults): the guest is
// guestAddr/24, and the host's loopback answers at guestHostAddr.
const (
	guestAddr     = "10.0.2.15"
	guestHostAddr = "10.0.2.2"
)

// Status of one test or command in one kernel.
type Status string

const (
	Pass    Status = "PASS"
	Fail    Status = "FAIL"
	Skip    Status = "SKIP"
	Missing Status = "MISSING"
)

// Outcome is what one test or command did in one kernel.
type Outcome struct {
	Name   string
	Status Status
	Reason string // skip reason or first failure lines
}

// Result is one entry's run.
type Result struct {
	Entry    Entry
	Kernel   *Kernel
	Outcomes []Outcome
	// Metrics are the "metric name=value" lines the tests logged: the
	// numbers compared across architectures.
	Metrics map[string]string
	Err     error // the run as a whole failed: timeout, panic, missing results
	// Retried says why the entry was booted again (a boot died or hung with
	// no test failing), one reason per failed boot; empty when it was not.
	Retried string
	Log     string
	Fetch   time.Duration
	Boot    time.Duration // qemu start to the first test starting
	Tests   time.Duration // first test starting to done
	Total   time.Duration // qemu start to exit
}

// failedTest says whether a test or command in the run failed (rather than
// the guest as a whole dying or hanging).
func (r *Result) failedTest() bool {
	for _, o := range r.Outcomes {
		if o.Status == Fail {
			return true
		}
	}
	return false
}

// Failed says whether the entry must make the harness exit non-zero.
func (r *Result) Failed() bool {
	if r.Err != nil {
		return true
	}
	for _, o := range r.Outcomes {
		if o.Status == Fail || o.Status == Missing {
			return true
		}
	}
	return false
}

// moduleRoot is the directory of go.mod, where every go command runs.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding module root: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("finding module root: not inside the bpfleet module")
	}
	return filepath.Dir(gomod), nil
}

func goBuild(root, goarch string, args ...string) error {
	// Stripped binaries make a smaller initramfs, which the kernel unpacks
	// at emulated speed on every boot.
	if len(args) > 0 && (args[0] == "build" || args[0] == "test") {
		args = append([]string{args[0], "-ldflags=-s -w"}, args[1:]...)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s (GOARCH=%s): %w\n%s", strings.Join(args, " "), goarch, err, out)
	}
	return nil
}

// buildArch builds /init, the test binaries and bpfleet for one GOARCH into
// dir, and returns the initramfs contents common to every entry of that arch.
func buildArch(o *Options, goarch string) (*initramfs, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.WorkDir, goarch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := newInitramfs()
	initBin := filepath.Join(dir, "init")
	if err := goBuild(root, goarch, "build", "-trimpath", "-o", initBin, "./test/kernels/vminit"); err != nil {
		return nil, err
	}
	r.addFile("init", initBin, 0o755)
	for _, pkg := range o.Packages {
		bin := filepath.Join(dir, filepath.Base(pkg)+".test")
		args := []string{"test", "-c", "-trimpath", "-o", bin}
		if o.Tags != "" {
			args = append(args, "-tags", o.Tags)
		}
		if err := goBuild(root, goarch, append(args, pkg)...); err != nil {
			return nil, err
		}
		r.addFile("tests/"+filepath.Base(bin), bin, 0o755)
	}
	deps, err := readGuestDeps(root, o.Packages)
	if err != nil {
		return nil, err
	}
	if err := buildGuestBins(r, deps.builds, dir, goarch); err != nil {
		return nil, err
	}
	r.debs = deps.debs
	if len(o.Commands) > 0 || o.Agent {
		bin := filepath.Join(dir, "bpfleet")
		if err := goBuild(root, goarch, "build", "-trimpath", "-o", bin, "./cmd/bpfleet"); err != nil {
			return nil, err
		}
		r.addFile("bin/bpfleet", bin, 0o755)
	}
	if len(o.Commands) > 0 {
		r.addData("bpfleet/commands", []byte(strings.Join(o.Commands, "\n")+"\n"), 0o644)
	}
	if len(o.Env) > 0 {
		r.addData("bpfleet/env", []byte(strings.Join(o.Env, "\n")+"\n"), 0o644)
	}
	if len(o.TestArgs) > 0 {
		r.addData("bpfleet/testargs", []byte(strings.Join(o.TestArgs, "\n")+"\n"), 0o644)
	}
	return r, nil
}

// qemuArgs is the command line booting the entry's kernel under TCG (KVM on
// the CI machines dies on the guest's first cmpxchg16b).
func qemuArgs(e Entry, kernel, initrd string, loglevel int, net bool) []string {
	common := []string{"-accel", "tcg,thread=multi", "-m", "1024", "-smp", "2",
		"-nographic", "-no-reboot", "-kernel", kernel, "-initrd", initrd}
	if net {
		// User-mode networking needs no privileges or host set-up; a
		// virtio NIC is what Debian's kernels drive on both machines.
		common = append(common, "-nic", "user,model=virtio-net-pci")
	}
	// quiet loglevel=2 keeps all but emergency and alert messages (panics,
	// Oops, BUG) from interleaving with the result stream, so a guest that
	// dies says why; panic=-1 turns a panic into a reboot, which
	// -no-reboot turns into qemu exiting.
	if loglevel == 0 {
		loglevel = 2
	}
	cmdline := fmt.Sprintf("panic=-1 oops=panic quiet loglevel=%d", loglevel)
	if e.Arch == "arm64" {
		// pauth-impdef: an implementation-defined pointer-auth hash that
		// TCG computes far faster than the architected QARMA.
		return append([]string{"qemu-system-aarch64", "-M", "virt", "-cpu", "max,pauth-impdef=on"},
			append(common, "-append", "console=ttyAMA0 "+cmdline)...)
	}
	return append([]string{"qemu-system-x86_64", "-cpu", "max"},
		append(common, "-append", "console=ttyS0 "+cmdline)...)
}

// boot runs qemu and copies the console to logPath, timing the phases.
func boot(ctx context.Context, e Entry, kernel, initrd, logPath string, o *Options, res *Result) error {
	args := qemuArgs(e, kernel, initrd, o.LogLevel, o.Net)
	silenceLimit := o.Silence
	if silenceLimit <= 0 {
		silenceLimit = 2 * time.Minute
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = nil
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	start := time.Now()
	var firstBegin, done time.Time
	var lastOutput atomic.Int64 // unix ns of the last console line
	lastOutput.Store(start.UnixNano())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		br := bufio.NewReader(pr)
		for {
			line, err := br.ReadString('\n')
			lastOutput.Store(time.Now().UnixNano())
			logf.WriteString(line)
			if firstBegin.IsZero() && strings.Contains(line, "@@bpfleet-begin ") {
				firstBegin = time.Now()
			}
			if strings.Contains(line, "@@bpfleet-done@@") {
				done = time.Now()
			}
			if err != nil {
				return
			}
		}
	}()
	// A guest whose console stays silent this long has hung (every test
	// and command prints within seconds): stop it now rather than at the
	// boot's time limit, so that a retry fits in the CI budget.
	var silent atomic.Bool
	stopWatch := make(chan struct{})
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting qemu: %w", err)
	}
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-t.C:
				if time.Since(time.Unix(0, lastOutput.Load())) > silenceLimit {
					silent.Store(true)
					cmd.Process.Kill()
					return
				}
			}
		}
	}()
	runErr := cmd.Wait()
	close(stopWatch)
	pw.Close()
	wg.Wait()
	res.Total = time.Since(start)
	if !firstBegin.IsZero() {
		res.Boot = firstBegin.Sub(start)
		if !done.IsZero() {
			res.Tests = done.Sub(firstBegin)
		}
	}
	if silent.Load() {
		return fmt.Errorf("hung: no console output for %s (console log %s)", silenceLimit, logPath)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("timed out after %s (console log %s)", res.Total.Round(time.Second), logPath)
	}
	if runErr != nil {
		return fmt.Errorf("qemu: %w (console log %s)", runErr, logPath)
	}
	return nil
}

// RunEntry fetches, builds, boots and evaluates one entry. The initramfs
// base is shared between entries of one arch.
func RunEntry(ctx context.Context, e Entry, o *Options, base *initramfs) *Result {
	res := &Result{Entry: e}
	t0 := time.Now()
	k, err := FetchKernel(e, o.Net, o.Logf)
	res.Fetch = time.Since(t0)
	if err != nil {
		res.Err = err
		return res
	}
	res.Kernel = k
	base.addData("bpfleet/entry", []byte(e.Name+"\n"), 0o644)
	if o.Net {
		addNetModules(base, k.NetModules)
	}
	if base.debFiles, err = addDebs(base, base.debFiles, e, base.debs, o.Logf); err != nil {
		res.Err = err
		return res
	}
	dir := filepath.Join(o.WorkDir, e.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Err = err
		return res
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := base.writeFile(initrd); err != nil {
		res.Err = err
		return res
	}
	res.Log = filepath.Join(dir, "console.log")
	o.Logf("%s: booting %s %s", e.Name, k.Package, k.Version)
	bctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	bootErr := boot(bctx, e, k.Image, initrd, res.Log, o, res)
	log, err := os.ReadFile(res.Log)
	if err != nil {
		res.Err = err
		return res
	}
	res.Outcomes, res.Metrics, err = parseConsole(log, o)
	res.Err = errors.Join(bootErr, err)
	return res
}

// addNetModules puts the kernel's NIC modules in the initramfs, replacing
// those of the arch's previous entry, and lists them for vminit in load
// order with the addresses it gives eth0.
func addNetModules(r *initramfs, mods []string) {
	r.removeUnder("lib/modules")
	var list []string
	for _, m := range mods {
		dst := "lib/modules/" + filepath.Base(m)
		r.addFile(dst, m, 0o644)
		list = append(list, "/"+dst)
	}
	r.addData("bpfleet/net", []byte(fmt.Sprintf("addr %s/24\nmodules %s\n", guestAddr, strings.Join(list, " "))), 0o644)
}

var (
	beginRe = regexp.MustCompile(`@@bpfleet-begin (test|cmd) (.+)@@`)
	endRe   = regexp.MustCompile(`@@bpfleet-end (test|cmd) (.+) exit=(-?\d+)@@`)
	panicRe = regexp.MustCompile(`Kernel panic - not syncing.*|BUG: .*|Oops: .*`)
)

type segment struct {
	kind, name string
	out        bytes.Buffer
	ended      bool
	exit       int
}

// parseConsole splits the console log into the framed segments and turns
// each into outcomes. An error says the run as a whole is broken.
func parseConsole(log []byte, o *Options) ([]Outcome, map[string]string, error) {
	log = bytes.ReplaceAll(log, []byte("\r"), nil)
	var segs []*segment
	var cur *segment
	var errs []error
	doneSeen := false
	for _, line := range strings.SplitAfter(string(log), "\n") {
		if m := panicRe.FindString(line); m != "" {
			errs = append(errs, fmt.Errorf("kernel: %s", strings.TrimSpace(m)))
		}
		if m := beginRe.FindStringSubmatch(line); m != nil {
			cur = &segment{kind: m[1], name: m[2]}
			segs = append(segs, cur)
			continue
		}
		if m := endRe.FindStringSubmatch(line); m != nil && cur != nil && cur.name == m[2] {
			cur.ended = true
			cur.exit, _ = strconv.Atoi(m[3])
			// The end marker follows a newline we printed; anything before
			// it on the line belongs to the segment.
			cur = nil
			continue
		}
		if strings.Contains(line, "@@bpfleet-done@@") {
			doneSeen = true
			continue
		}
		if cur != nil {
			cur.out.WriteString(line)
		}
	}
	var outs []Outcome
	metrics := map[string]string{}
	nTests := 0
	for _, s := range segs {
		switch s.kind {
		case "test":
			nTests++
			tos, err := testOutcomes(s, metrics)
			outs = append(outs, tos...)
			if err != nil {
				errs = append(errs, err)
			}
		case "cmd":
			oc := Outcome{Name: "cmd: " + s.name, Status: Pass}
			switch {
			case !s.ended:
				oc.Status, oc.Reason = Missing, "no end marker: the guest died while it ran"
			case s.exit != 0:
				oc.Status, oc.Reason = Fail, fmt.Sprintf("exit %d: %s", s.exit, lastLines(s.out.String(), 3))
			}
			outs = append(outs, oc)
		}
	}
	if nTests == 0 {
		errs = append(errs, errors.New("no test binary ran: the guest did not reach /init's tests"))
	}
	if len(o.Commands) > 0 {
		found := map[string]bool{}
		for _, s := range segs {
			if s.kind == "cmd" {
				found[s.name] = true
			}
		}
		for _, c := range o.Commands {
			if !found[strings.Join(strings.Fields(c), " ")] {
				outs = append(outs, Outcome{Name: "cmd: " + c, Status: Missing, Reason: "never started"})
			}
		}
	}
	if !doneSeen {
		errs = append(errs, errors.New("guest never reported done: it crashed, hung or was killed"))
	}
	return outs, metrics, errors.Join(errs...)
}

// metricRe matches what ktest logs for cross-kernel comparison: "metric"
// for a count the kernels must agree on, "measure" for a timing or a ratio
// of timings, shown beside them (as "~value") but never compared.
var metricRe = regexp.MustCompile(`\b(metric|measure) ([A-Za-z0-9_.]+)=(\S+)`)

type testEvent struct {
	Action string
	Test   string
	Output string
}

// testOutcomes converts one test binary's -test.v=test2json stream with
// `go tool test2json` and collects each test's result and its reason.
func testOutcomes(s *segment, metrics map[string]string) ([]Outcome, error) {
	cmd := exec.Command("go", "tool", "test2json", "-p", s.name)
	cmd.Stdin = bytes.NewReader(s.out.Bytes())
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("test2json on %s: %w", s.name, err)
	}
	var order []string
	byName := map[string]*Outcome{}
	outputs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var ev testEvent
		if err := dec.Decode(&ev); err != nil {
			break
		}
		if ev.Test == "" {
			continue
		}
		switch ev.Action {
		case "run":
			if byName[ev.Test] == nil {
				order = append(order, ev.Test)
				byName[ev.Test] = &Outcome{Name: ev.Test, Status: Missing, Reason: "started, never finished"}
			}
		case "output":
			if m := metricRe.FindStringSubmatch(ev.Output); m != nil {
				metrics[m[2]] = m[3]
				if m[1] == "measure" {
					metrics[m[2]] = "~" + m[3]
				}
			}
			if t := strings.TrimSpace(ev.Output); t != "" && !strings.HasPrefix(t, "=== ") && !strings.HasPrefix(t, "--- ") && !metricRe.MatchString(t) {
				outputs[ev.Test] = append(outputs[ev.Test], t)
			}
		case "pass", "fail", "skip":
			oc := byName[ev.Test]
			if oc == nil {
				order = append(order, ev.Test)
				oc = &Outcome{Name: ev.Test}
				byName[ev.Test] = oc
			}
			oc.Status = map[string]Status{"pass": Pass, "fail": Fail, "skip": Skip}[ev.Action]
			oc.Reason = ""
			if ev.Action != "pass" {
				oc.Reason = lastLines(strings.Join(outputs[ev.Test], "\n"), 5)
			}
		}
	}
	var outs []Outcome
	for _, n := range order {
		outs = append(outs, *byName[n])
	}
	var errs []error
	if !s.ended {
		errs = append(errs, fmt.Errorf("%s: no end marker: the guest died while it ran", s.name))
	} else if s.exit != 0 {
		failed := false
		for _, oc := range outs {
			failed = failed || oc.Status == Fail
		}
		if !failed {
			errs = append(errs, fmt.Errorf("%s exited %d without a failing test: %s", s.name, s.exit, lastLines(s.out.String(), 3)))
		}
	}
	if len(outs) == 0 {
		errs = append(errs, fmt.Errorf("%s ran no tests", s.name))
	}
	return outs, errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
