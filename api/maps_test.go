package api

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/mapview"
	"github.com/bpfleet/bpfleet/probes/mapstats"
	"github.com/bpfleet/bpfleet/test/bpfmaps"
)

// TestServeMaps: /v1/maps over a real scan lists the test's maps with the
// entries it put in, the kernel's memory figure, the program that uses them
// and the test process as that program's owner; the filters and sorts keep
// and order what they say.
func TestServeMaps(t *testing.T) {
	set := bpfmaps.New(t, "api_maps", 7, 32)
	a, err := agent.New(agent.Config{Maps: true, Owners: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	snap, err := a.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h := newTestServer(t, Options{Snapshot: func() *agent.Snapshot { return snap }}).Handler()

	w := get(t, h, "/v1/maps?prog_id="+itoa(set.ProgID))
	if w.Code != 200 {
		t.Fatalf("/v1/maps: %d %s", w.Code, w.Body)
	}
	l := decode[mapview.List](t, w)
	if l.Scan.Error != "" || l.Scan.Source == "" || l.Total != len(snap.Maps) || l.Seq != snap.Seq {
		t.Fatalf("map list scan %+v total %d seq %d; snapshot has %d maps, seq %d", l.Scan, l.Total, l.Seq, len(snap.Maps), snap.Seq)
	}
	if len(l.Maps) != 3 {
		t.Fatalf("/v1/maps?prog_id=%d lists %d maps, want the test's 3", set.ProgID, len(l.Maps))
	}
	var sum uint64
	for i, own := range set.Maps() {
		m := l.Maps[i] // id order: created in this order
		if m.ID != bpfmaps.MapID(t, own) {
			t.Errorf("map %d is id %d, want %d", i, m.ID, bpfmaps.MapID(t, own))
			continue
		}
		if want := bpfmaps.Memlock(t, own.FD()); m.MemoryBytes == nil || *m.MemoryBytes != want {
			t.Errorf("map %s memory %v, want fdinfo's %d", m.Name, m.MemoryBytes, want)
		} else {
			sum += want
		}
		if len(m.Users) != 1 || m.Users[0].ProgID != set.ProgID || m.Users[0].ProgName != "api_maps_p" {
			t.Errorf("map %s users %+v, want program %d api_maps_p", m.Name, m.Users, set.ProgID)
		} else if !slices.ContainsFunc(m.Users[0].Owners, func(o mapview.MapOwner) bool { return o.PID == os.Getpid() }) {
			t.Errorf("map %s: owners %+v lack the test process %d", m.Name, m.Users[0].Owners, os.Getpid())
		}
	}
	if l.MemoryBytes != sum {
		t.Errorf("memory_bytes %d, want the maps' sum %d", l.MemoryBytes, sum)
	}
	hm := l.Maps[0]
	if hm.Type != "hash" {
		t.Fatalf("first map is a %s, want the hash map", hm.Type)
	}
	if hm.EntriesReason == mapstats.ReasonNoKfunc {
		t.Skipf("the kernel keeps no element count: %s", hm.EntriesReason)
	}
	if hm.Entries == nil || *hm.Entries != uint64(set.HashEntries) || hm.Fullness == nil || *hm.Fullness != float64(set.HashEntries)/float64(set.HashMax) {
		t.Errorf("hash map entries %v fullness %v (%s), want %d and %d/%d", hm.Entries, hm.Fullness, hm.EntriesReason, set.HashEntries, set.HashEntries, set.HashMax)
	}

	for q, want := range map[string][]string{
		"&type=hash":                {"api_maps_h"},
		"&name=_r":                  {"api_maps_r"},
		"&sort=fullness&limit=1":    {"api_maps_h"}, // the only one with a fullness
		"&sort=name":                {"api_maps_a", "api_maps_h", "api_maps_r"},
		"&namespace=no-such-ns":     nil,
		"&type=array&name=api_maps": {"api_maps_a"},
	} {
		l := decode[mapview.List](t, get(t, h, "/v1/maps?prog_id="+itoa(set.ProgID)+q))
		var got []string
		for _, m := range l.Maps {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("/v1/maps?prog_id=%d%s = %v, want %v", set.ProgID, q, got, want)
		}
	}
	l = decode[mapview.List](t, get(t, h, "/v1/maps?sort=memory"))
	for i := 1; i < len(l.Maps); i++ {
		a, b := l.Maps[i-1].MemoryBytes, l.Maps[i].MemoryBytes
		if a == nil && b != nil || a != nil && b != nil && *a < *b {
			t.Fatalf("sort=memory: map %d (%v) before map %d (%v)", l.Maps[i-1].ID, a, l.Maps[i].ID, b)
		}
	}
}
