package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/syncbuf"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/probes/taskfile"
	"github.com/cilium/ebpf"
)

// pinTestBPFFS is a directory of the test's own on the host's bpffs:
// bpfleet takes it as its bpffs mount (--bpffs), so the test's pins never
// touch a running agent's.
func pinTestBPFFS(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("bpfleet-cmdtest-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Skipf("cannot use the host's bpffs at /sys/fs/bpf: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type listScanDoc struct {
	Programs []map[string]any `json:"programs"`
	Scan     struct {
		Source         string `json:"source"`
		FallbackReason string `json:"fallback_reason"`
		IteratorPin    string `json:"iterator_pin"`
		OwnersPin      string `json:"owners_pin"`
		OwnersSource   string `json:"owners_source"`
	} `json:"scan"`
}

func listJSON(t *testing.T, bin string, args ...string) listScanDoc {
	t.Helper()
	return listJSONOwners(t, bin, append([]string{"--no-owners"}, args...)...)
}

func listJSONOwners(t *testing.T, bin string, args ...string) listScanDoc {
	t.Helper()
	return listJSONEnv(t, nil, bin, args...)
}

// listJSONEnv runs list -o json with env added to the test's environment.
func listJSONEnv(t *testing.T, env []string, bin string, args ...string) listScanDoc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"list", "-o", "json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list %v: %v", args, err)
	}
	var doc listScanDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("list %v: %v", args, err)
	}
	return doc
}

// TestListFromPin: with an agent's iterator pinned, a one-shot list reads
// it (scan.source iterator, scan.iterator_pin its path) and reports every
// idle program exactly as the syscall scan does; without a pin, or without
// bpffs, it loads its own iterator where the CO-RE cache holds it and
// otherwise scans by syscall and says why.
func TestListFromPin(t *testing.T) {
	bin := bpfleetBin(t)
	dir := pinTestBPFFS(t)
	ids := loadSocketFilters(t, 50)

	// A list with a cold CO-RE cache leaves it written: each check that
	// wants a cold one gets its own.
	emptyCache := func() []string { return []string{config.CacheDirEnv + "=" + t.TempDir()} }
	coldDir := t.TempDir()
	cold := []string{config.CacheDirEnv + "=" + coldDir}
	none := listJSONEnv(t, cold, bin, "--no-owners", "--bpffs", dir)
	if none.Scan.Source != "syscall" || !strings.Contains(none.Scan.FallbackReason, "no iterator pinned at "+dir) {
		t.Errorf("no pin: scan %+v, want syscall saying no iterator is pinned", none.Scan)
	}
	// It writes the cache in the background, after its output: wait for
	// it (a busy machine may take seconds), then the next list loads both
	// iterators from it.
	for deadline := time.Now().Add(30 * time.Second); !progstats.Cached(coldDir) || !taskfile.Cached(coldDir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a list with a cold CO-RE cache left it cold 30 s after it ended: %s holds no stats and task_file iterators", coldDir)
		}
	}
	if next := listJSONEnv(t, cold, bin, "--bpffs", dir); next.Scan.Source != "iterator" || next.Scan.OwnersSource != agent.OwnersSourceIterator {
		t.Errorf("the list after one with a cold CO-RE cache: scan %+v, want programs and owners by the iterators that list left in the cache", next.Scan)
	}
	notfs := listJSONEnv(t, emptyCache(), bin, "--no-owners", "--bpffs", t.TempDir())
	if notfs.Scan.Source != "syscall" || !strings.Contains(notfs.Scan.FallbackReason, "is not a bpffs mount") {
		t.Errorf("no bpffs: scan %+v, want syscall saying it is not bpffs", notfs.Scan)
	}
	warm := t.TempDir()
	if cpus, err := progstats.PossibleCPUs(); err != nil {
		t.Fatal(err)
	} else if it, li, err := progstats.LoadCached(cpus, warm); err != nil || li.CacheErr != nil {
		t.Fatalf("priming the CO-RE cache: %v, %v", err, li.CacheErr)
	} else {
		it.Close()
	}
	cached := listJSONEnv(t, []string{config.CacheDirEnv + "=" + warm}, bin, "--no-owners", "--bpffs", dir)
	if cached.Scan.Source != "iterator" || cached.Scan.IteratorPin != "" || cached.Scan.FallbackReason != "" {
		t.Errorf("no pin, the iterator in the CO-RE cache: scan %+v, want its own iterator", cached.Scan)
	}

	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := progstats.Publish(dir, cpus) // what the agent does at start
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel refuses the bpf_prog stats iterator: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	pinned := listJSON(t, bin, "--bpffs", dir)
	if pinned.Scan.Source != "iterator" || pinned.Scan.IteratorPin != pub.Path() || pinned.Scan.FallbackReason != "" {
		t.Fatalf("with a pin: scan %+v, want the iterator from %s", pinned.Scan, pub.Path())
	}
	sys := listJSON(t, bin, "--bpffs", dir, "--scan-source", "syscall")
	byID := map[float64]map[string]any{}
	for _, p := range sys.Programs {
		byID[p["id"].(float64)] = p
	}
	compared := 0
	for _, p := range pinned.Programs {
		id := p["id"].(float64)
		if !ids[uint32(id)] {
			continue
		}
		q, ok := byID[id]
		if !ok {
			t.Errorf("program %v listed from the pin, not by syscall", id)
			continue
		}
		// load_time is boot time + the kernel's load_time: each process
		// derives boot time from the clock, a microsecond apart.
		lp, lq := loadTime(t, p), loadTime(t, q)
		if d := lp.Sub(lq); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("program %v: load_time %v from the pin, %v by syscall", id, lp, lq)
		}
		delete(p, "load_time")
		delete(q, "load_time")
		if !reflect.DeepEqual(p, q) {
			t.Errorf("program %v:\nfrom the pin %v\nby syscall   %v", id, p, q)
		}
		compared++
	}
	if compared != len(ids) {
		t.Errorf("compared %d of the test's %d programs", compared, len(ids))
	}

	// Owners: from the agent's pinned task_file iterator, the same as
	// from the /proc walk a list does without one and a cold CO-RE cache,
	// and from the iterator a list loads itself once the cache holds it.
	walked := listJSONEnv(t, emptyCache(), bin, "--bpffs", dir)
	if walked.Scan.OwnersPin != "" || walked.Scan.OwnersSource != agent.OwnersSourceProc {
		t.Fatalf("no pin, empty CO-RE cache: scan %+v, want owners from the /proc walk", walked.Scan)
	}
	cache := t.TempDir()
	if it, li, err := taskfile.LoadCached(cache); err != nil || li.CacheErr != nil {
		t.Fatalf("priming the CO-RE cache: %v, %v", err, li.CacheErr)
	} else {
		it.Close()
	}
	loaded := listJSONEnv(t, []string{config.CacheDirEnv + "=" + cache}, bin, "--bpffs", dir)
	if loaded.Scan.OwnersPin != "" || loaded.Scan.OwnersSource != agent.OwnersSourceIterator {
		t.Fatalf("no pin, CO-RE cache holding the task_file iterator: scan %+v, want owners from the iterator", loaded.Scan)
	}
	if noIter := listJSONEnv(t, []string{config.CacheDirEnv + "=" + cache}, bin, "--bpffs", dir, "--no-iterator"); noIter.Scan.OwnersSource != agent.OwnersSourceProc {
		t.Errorf("--no-iterator: scan %+v, want owners from the /proc walk", noIter.Scan)
	}
	tf, err := taskfile.Publish(dir, "")
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel refuses iter/task_file: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	fromPin := listJSONOwners(t, bin, "--bpffs", dir)
	if fromPin.Scan.OwnersPin != tf.Path() {
		t.Fatalf("owners: scan %+v, want them from the pin %s", fromPin.Scan, tf.Path())
	}
	owners := func(d listScanDoc) map[float64]any {
		m := map[float64]any{}
		for _, p := range d.Programs {
			if id := p["id"].(float64); ids[uint32(id)] {
				m[id] = p["owners"]
			}
		}
		return m
	}
	w, g, l := owners(walked), owners(fromPin), owners(loaded)
	if len(g) != len(ids) || !reflect.DeepEqual(w, g) {
		t.Errorf("owners of the test's %d programs: %d from the pin, differing from the /proc walk's %d", len(ids), len(g), len(w))
	}
	if !reflect.DeepEqual(w, l) {
		t.Errorf("owners of the test's %d programs: %d from the loaded iterator, differing from the /proc walk's %d", len(ids), len(l), len(w))
	}
	for id, o := range g {
		if own, _ := o.([]any); len(own) != 1 || int(own[0].(map[string]any)["pid"].(float64)) != os.Getpid() {
			t.Errorf("program %v: owners %v, want this test process", id, o)
			break
		}
	}
}

func loadTime(t *testing.T, p map[string]any) time.Time {
	t.Helper()
	s, _ := p["load_time"].(string)
	lt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("program %v load_time %q: %v", p["id"], s, err)
	}
	return lt
}

// TestAgentPinsIterator: a running `bpfleet agent` pins its stats and
// task_file iterators for list, and removes the pins when it stops.
func TestAgentPinsIterator(t *testing.T) {
	bin := bpfleetBin(t)
	dir := pinTestBPFFS(t)
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	pin, tfPin := progstats.PinPath(dir, cpus), taskfile.PinPath(dir)
	var log syncbuf.Buffer
	cmd := exec.Command(bin, "agent", "--bpffs", dir, "--interval", "1s", "--calibrate=false", "--api-addr=")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if strings.Contains(log.String(), "agent started") {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("agent not started after 20 s; it said:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := log.String(); strings.Contains(l, "not pinning the stats iterator") && strings.Contains(l, "not supported") {
		t.Skipf("kernel refuses the stats iterator; agent said:\n%s", l)
	}
	doc := listJSONOwners(t, bin, "--bpffs", dir)
	if doc.Scan.Source != "iterator" || doc.Scan.IteratorPin != pin || doc.Scan.OwnersPin != tfPin {
		t.Errorf("list while the agent runs: scan %+v, want the iterator from %s and owners from %s; agent said:\n%s", doc.Scan, pin, tfPin, log.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, log.String())
	}
	for _, p := range []string{pin, tfPin} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pin %s still there after the agent stopped (%v); agent said:\n%s", p, err, log.String())
		}
	}
}
