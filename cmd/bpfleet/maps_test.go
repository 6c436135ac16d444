package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent/mapview"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/mapstats"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

// kernelMapIDs walks the kernel's map ids (GET_NEXT_ID), as bpftool does.
func kernelMapIDs(t *testing.T) []uint32 {
	t.Helper()
	var ids []uint32
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ids
		}
		if err != nil {
			t.Fatalf("walking map ids: %v", err)
		}
		ids, id = append(ids, uint32(next)), next
	}
}

// TestMapsJSONTruth: `bpfleet maps -o json` lists every map the kernel
// had before and after it ran (others' maps may come and go meanwhile),
// and the test's own with the entries it put in, the kernel's memory
// figure from the test's fdinfo, and its program among the users.
func TestMapsJSONTruth(t *testing.T) {
	bin := bpfleetBin(t)
	set := bpfmaps.New(t, "cli_maps", 9, 64)
	before := kernelMapIDs(t)
	out, err := exec.Command(bin, "maps", "-o", "json").Output()
	if err != nil {
		t.Fatalf("maps -o json: %v", err)
	}
	after := kernelMapIDs(t)
	var l mapview.List
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("maps -o json: %v", err)
	}
	if l.Scan.Error != "" || l.Total != len(l.Maps) {
		t.Fatalf("scan %+v, %d maps of %d", l.Scan, len(l.Maps), l.Total)
	}
	byID := map[uint32]*mapview.Map{}
	for i := range l.Maps {
		byID[l.Maps[i].ID] = &l.Maps[i]
	}
	for _, id := range before {
		if slices.Contains(after, id) && byID[id] == nil {
			t.Errorf("map %d, on the node before and after, is missing", id)
		}
	}
	var sum uint64
	for i := range l.Maps {
		if mb := l.Maps[i].MemoryBytes; mb != nil { // nil: gone before its fdinfo was read
			sum += *mb
		}
	}
	if l.MemoryBytes != sum {
		t.Errorf("memory_bytes %d, the maps sum to %d", l.MemoryBytes, sum)
	}
	for _, own := range set.Maps() {
		id := bpfmaps.MapID(t, own)
		m := byID[id]
		if m == nil {
			t.Errorf("the test's map %d is missing", id)
			continue
		}
		if want := bpfmaps.Memlock(t, own.FD()); m.MemoryBytes == nil || *m.MemoryBytes != want {
			t.Errorf("map %s memory %v, fdinfo says %d", m.Name, m.MemoryBytes, want)
		}
		if !slices.Contains(m.ProgramIDs, set.ProgID) || !slices.ContainsFunc(m.Users, func(u mapview.User) bool {
			return u.ProgID == set.ProgID && slices.ContainsFunc(u.Owners, func(o mapview.MapOwner) bool { return o.PID == os.Getpid() })
		}) {
			t.Errorf("map %s: program ids %v users %+v, want program %d owned by the test process", m.Name, m.ProgramIDs, m.Users, set.ProgID)
		}
	}
	h := byID[bpfmaps.MapID(t, set.Hash)]
	switch {
	case h == nil:
	case h.EntriesReason == mapstats.ReasonNoKfunc:
		t.Skipf("the kernel keeps no element count: %s", h.EntriesReason)
	case h.Type != "hash" || h.MaxEntries != uint32(set.HashMax) || h.Entries == nil || *h.Entries != uint64(set.HashEntries) || h.EntriesMethod != "kfunc":
		t.Errorf("hash map %+v, want %d entries of %d counted by the kfunc", h.Map, set.HashEntries, set.HashMax)
	}
	for _, own := range []*ebpf.Map{set.Array, set.RingBuf} {
		if m := byID[bpfmaps.MapID(t, own)]; m != nil && (m.Entries != nil || m.Fullness != nil || m.EntriesReason == "") {
			t.Errorf("%s map %s: entries %v fullness %v, want none with a reason", m.Type, m.Name, m.Entries, m.Fullness)
		}
	}
}

// TestMapsWatchJSONL: `maps -o jsonl --watch` prints one line per
// interval, each a whole list with the test's hash map as it is then.
func TestMapsWatchJSONL(t *testing.T) {
	bin := bpfleetBin(t)
	set := bpfmaps.New(t, "cli_mapsw", 3, 8)
	hid := bpfmaps.MapID(t, set.Hash)
	const n, every = 3, 300 * time.Millisecond
	cmd := exec.Command(bin, "maps", "-o", "jsonl", "--watch", "-i", every.String(), "-n", strconv.Itoa(n), "--type", "hash")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	var lines int
	var times []time.Time
	for sc.Scan() {
		var l mapview.List
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d is not a list: %v", lines+1, err)
		}
		i := slices.IndexFunc(l.Maps, func(m mapview.Map) bool { return m.ID == hid })
		if i < 0 {
			t.Fatalf("line %d lacks the test's hash map %d", lines+1, hid)
		}
		if e := l.Maps[i].Entries; l.Maps[i].EntriesReason != mapstats.ReasonNoKfunc && (e == nil || *e != uint64(lines+3)) {
			t.Errorf("line %d: entries %v, want %d", lines+1, e, lines+3)
		}
		// One more element before the next read.
		if err := set.Hash.Put(uint32(100+lines), uint64(0)); err != nil {
			t.Fatal(err)
		}
		times = append(times, l.Time)
		lines++
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("maps --watch: %v", err)
	}
	if lines != n {
		t.Fatalf("%d lines, want %d", lines, n)
	}
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d < every/2 || d > 3*every {
			t.Errorf("lines %d and %d are %v apart, want about %v", i, i+1, d, every)
		}
	}
}

// TestMapSortsMatchConfig: every order --sort accepts is one mapview
// knows, and no other.
func TestMapSortsMatchConfig(t *testing.T) {
	for _, s := range config.MapSorts {
		if mapview.Sorts[s] == nil {
			t.Errorf("--sort %s has no order in mapview", s)
		}
	}
	if len(mapview.Sorts) != len(config.MapSorts) {
		t.Errorf("mapview has %d orders, --sort accepts %d", len(mapview.Sorts), len(config.MapSorts))
	}
}

// TestMapsTable: the table's cells for a map: the bar and percentage, the
// memory in binary units, the user and its owner.
func TestMapsTable(t *testing.T) {
	f := 0.42
	for _, c := range []struct {
		f     *float64
		ascii bool
		want  string
	}{{&f, true, "####...... 42%"}, {&f, false, "████░░░░░░ 42%"}, {nil, false, "-"}, {ptr(0.001), true, "#......... 0%"}, {ptr(1.2), true, "########## 120%"}} {
		if got := fullBar(c.f, 10, c.ascii); got != c.want {
			t.Errorf("fullBar(%v) = %q, want %q", c.f, got, c.want)
		}
	}
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 167936: "164 KiB", 5 << 30: "5.0 GiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	u := []mapview.User{{ProgID: 7, ProgName: "xdp_fw", Owners: []mapview.MapOwner{{PID: 3, Comm: "cilium-agent", PodNamespace: "kube-system", PodName: "cilium-x"}}}, {ProgID: 8}}
	if got, want := usersCell(u), "xdp_fw(7) cilium-agent(3) kube-system/cilium-x +1"; got != want {
		t.Errorf("usersCell = %q, want %q", got, want)
	}
}

func ptr[T any](v T) *T { return &v }
