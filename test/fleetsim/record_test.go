package fleetsim

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/probes/catalog"
	"github.com/bpfleet/bpfleet/test/canary"
	"github.com/bpfleet/bpfleet/test/pods"
)

// TestRecord records this kernel's snapshot for the simulator: it loads
// real programs (one catalog probe per attach type the kernel takes, the
// recursion canary where the kernel has a recursion guard, two pods with
// every per-pod kind of program), runs them, and takes two scans with the
// agent (calibrated, miss watcher on); the second is the recording, cut
// down to the programs loaded here (the machine is shared). It checks the
// recording survives JSON, which is how it is stored.
//
// BPFLEET_RECORD_DIR=dir writes it to dir/<release>.json.gz (README.md);
// BPFLEET_RECORD_PRINT=1 prints it base64 between
// markers, for a guest of the kernel matrix (test/fleetsim/README.md).
// BPFLEET_RECORD_PODS=0 leaves the pods out.
func TestRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("recording loads BPF programs: run as root")
	}
	ctx := context.Background()
	a, err := agent.New(agent.Config{Owners: true, QuietIntervals: 2, WatchMisses: true, StatsMode: agent.StatsAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// The agent's own budget is 3 s; a guest under TCG needs more
	// (BPFLEET_RECORD_CALIBRATION, a duration).
	budget := 3 * time.Second
	if v := os.Getenv("BPFLEET_RECORD_CALIBRATION"); v != "" {
		if budget, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BPFLEET_RECORD_CALIBRATION=%q: %v", v, err)
		}
	}
	if _, err := a.Calibrate(ctx, budget); err != nil {
		t.Logf("calibration: %v", err)
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ids := map[uint32]bool{}
	var refused []string
	for _, at := range catalog.All() {
		p, err := catalog.Load(at, catalog.Syscall, unix.Gettid())
		if err == nil {
			err = p.Attach()
		}
		if err != nil {
			// The kernel's answer: the recording of this kernel has no
			// program of that attach type.
			refused = append(refused, fmt.Sprintf("%s: %v", at, err))
			if p != nil {
				p.Close()
			}
			continue
		}
		defer p.Close()
		id, err := p.ID()
		if err != nil {
			t.Fatal(err)
		}
		ids[uint32(id)] = true
	}
	var c *canary.Canary
	if c, err = canary.Load(); err != nil {
		refused = append(refused, fmt.Sprintf("canary: %v", err))
		c = nil
	} else {
		defer c.Close()
		for _, f := range []func() (uint32, error){c.ProgramID, c.TriggerProgramID} {
			id, err := f()
			if err != nil {
				t.Fatal(err)
			}
			ids[id] = true
		}
	}
	if os.Getenv("BPFLEET_RECORD_PODS") != "0" {
		set := pods.New(t, 2, pods.Kinds...)
		for id := range set.IDs() {
			ids[id] = true
		}
	}
	for _, r := range refused {
		t.Logf("not recorded, the kernel refused: %s", r)
	}
	if len(ids) == 0 {
		t.Fatal("the kernel took none of the programs to record")
	}

	if _, err := a.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := (catalog.SyscallTrigger{}).Fire(20000); err != nil {
		t.Fatal(err)
	}
	if c != nil {
		if err := c.Trigger(200); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	snap, err := a.Scan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := cut(snap, ids)
	if len(rec.Programs) != len(ids) {
		t.Fatalf("the scan saw %d of the %d programs loaded", len(rec.Programs), len(ids))
	}
	ran := 0
	for _, p := range rec.Programs {
		if p.Delta.Runs > 0 {
			ran++
		}
	}
	if ran == 0 {
		t.Fatal("no recorded program ran between the scans: is stats accounting off?")
	}

	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back agent.Snapshot
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	// What JSON does not carry: Link.Pod (json:"-"), which only the
	// agent's attribution reads; the simulator replays the attribution's
	// result (owners, TargetClass).
	for _, p := range rec.Programs {
		for i := range p.Links {
			p.Links[i].Pod = nil
		}
	}
	if len(back.Programs) != len(rec.Programs) {
		t.Fatalf("the recorded snapshot does not survive JSON: %d programs back of %d", len(back.Programs), len(rec.Programs))
	}
	for i, p := range rec.Programs {
		// Times come back without their monotonic reading and in the
		// zone JSON gave them: compare them as instants.
		q := *back.Programs[i]
		if q.LoadTime.Equal(p.LoadTime) {
			q.LoadTime = p.LoadTime
		}
		if !reflect.DeepEqual(*p, q) {
			t.Fatalf("program %d (%s) does not survive JSON:\n%+v\nback:\n%+v", p.ID, p.Name, *p, q)
		}
	}
	if !reflect.DeepEqual(rec.Calibration, back.Calibration) || rec.Kernel != back.Kernel {
		t.Fatal("the recorded calibration or kernel does not survive JSON")
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(data)
	zw.Close()
	t.Logf("recorded %s: %d programs (%d ran), %d calibrated attach types, %d bytes gzip (%d JSON)",
		rec.Kernel.Release, len(rec.Programs), ran, len(rec.Calibration), gz.Len(), len(data))
	if dir := os.Getenv("BPFLEET_RECORD_DIR"); dir != "" {
		path := filepath.Join(dir, rec.Kernel.Release+".json.gz")
		if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	if os.Getenv("BPFLEET_RECORD_PRINT") == "1" {
		fmt.Printf("@@fleetsim-recording %s@@\n%s\n@@fleetsim-recording-end@@\n", rec.Kernel.Release, base64.StdEncoding.EncodeToString(gz.Bytes()))
	}
}

// cut is snap with the programs of ids only; what the simulator computes
// per node (attach-type and owner sums, episodes) is left out.
func cut(snap *agent.Snapshot, ids map[uint32]bool) *agent.Snapshot {
	c := *snap
	c.Programs = nil
	for _, p := range snap.Programs {
		if ids[p.ID] {
			cp := *p
			cp.Links = append([]agent.Link(nil), p.Links...)
			c.Programs = append(c.Programs, &cp)
		}
	}
	c.AttachTypes, c.Owners, c.Episodes, c.Maps, c.Misses = nil, nil, nil, nil, nil
	c.MissWatch.Watched, c.MissWatch.Waiting, c.MissWatch.Blind = nil, nil, nil
	return &c
}
