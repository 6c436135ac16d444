package agent

import (
	"os"
	"slices"
	"testing"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/cilium/ebpf"
)

// podFiller names every owner's pod as name; Generation says when name
// changed.
type podFiller struct {
	name string
	gen  uint64
}

func (f *podFiller) Fill(o *Owner)      { o.PodName = f.name }
func (f *podFiller) Generation() uint64 { return f.gen }

// plainFiller is a filler without Generation.
type plainFiller struct{ name string }

func (f *plainFiller) Fill(o *Owner) { o.PodName = f.name }

// TestOwnerRefreshReusesUnchanged: after some programs are reloaded, an
// owner refresh gives them new owners and keeps every other program's
// owners as they were (the same slice: neither converted nor filled
// again), unless the filler's Generation moved (then every owner is filled
// again) or the filler has none; the owners equal a fresh agent's.
func TestOwnerRefreshReusesUnchanged(t *testing.T) {
	progs := scantest.LoadPrograms(t, 8)
	ids := make([]uint32, len(progs))
	for i, p := range progs {
		ids[i] = scantest.ProgID(t, p)
	}
	reload := func(i int) {
		t.Helper()
		progs[i].Close()
		p, err := ebpf.NewProgram(scantest.SocketFilterSpec())
		if err != nil {
			t.Fatal(err)
		}
		progs[i] = p
		t.Cleanup(func() { p.Close() })
		ids[i] = scantest.ProgID(t, p)
	}
	a := newTestAgentWith(t, Config{Owners: true, OwnerIterator: true})
	f := &podFiller{name: "pod-1", gen: 1}
	a.SetOwnerFiller(f)
	scan(t, a)
	// ownersOf returns the owners of every program of progs, checking
	// that this process is among them in pod want (or, for progs[i],
	// except[i]).
	ownersOf := func(s *Snapshot, want string, except map[int]string) map[uint32][]Owner {
		t.Helper()
		out := map[uint32][]Owner{}
		for i, id := range ids {
			want := want
			if w, ok := except[i]; ok {
				want = w
			}
			p := findProg(s, id)
			if p == nil {
				t.Fatalf("program %d missing", id)
			}
			j := slices.IndexFunc(p.Owners, func(o Owner) bool { return o.PID == os.Getpid() })
			if j < 0 || p.Owners[j].Via != owners.ViaFD || p.Owners[j].PodName != want {
				t.Fatalf("program %d: owners %+v, want pid %d via fd in pod %q", id, p.Owners, os.Getpid(), want)
			}
			out[id] = p.Owners
		}
		return out
	}
	same := func(a, b []Owner) bool { return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b) }
	refresh := func(reloaded ...int) *Snapshot {
		t.Helper()
		for _, i := range reloaded {
			reload(i)
		}
		s := scan(t, a)
		if !s.Scan.OwnersRefreshed {
			t.Fatalf("programs %v reloaded, yet no owner refresh", reloaded)
		}
		return s
	}
	// check says which programs' owners must be the same slices as in
	// before (kept) and which new ones (the others).
	check := func(before, after map[uint32][]Owner, kept ...int) {
		t.Helper()
		for i, id := range ids {
			switch k := slices.Contains(kept, i); {
			case k && !same(before[id], after[id]):
				t.Errorf("program %d (#%d) unchanged, yet its owners were made again: %+v", id, i, after[id])
			case !k && same(before[id], after[id]):
				t.Errorf("program %d (#%d): owners kept, want new ones: %+v", id, i, after[id])
			}
		}
	}

	o1 := ownersOf(scan(t, a), "pod-1", nil)
	o2 := ownersOf(refresh(0, 1), "pod-1", nil)
	check(o1, o2, 2, 3, 4, 5, 6, 7)

	// The filler's answers changed and its Generation says so: every
	// owner is filled again.
	f.name, f.gen = "pod-2", 2
	o3 := ownersOf(refresh(2), "pod-2", nil)
	check(o2, o3)

	// Same generation: only the reloaded program is filled (with what
	// the filler says now); the others keep what it said before.
	f.name = "pod-3"
	o4 := ownersOf(refresh(3), "pod-2", map[int]string{3: "pod-3"})
	check(o3, o4, 0, 1, 2, 4, 5, 6, 7)

	// A new filler, or one without Generation: every refresh fills every
	// owner.
	pf := &plainFiller{name: "plain-1"}
	a.SetOwnerFiller(pf)
	o5 := ownersOf(refresh(4), "plain-1", nil)
	check(o4, o5)
	pf.name = "plain-2"
	o6 := ownersOf(refresh(5), "plain-2", nil)
	check(o5, o6)

	// Exactly what an agent without history finds.
	b := newTestAgentWith(t, Config{Owners: true, OwnerIterator: true})
	b.SetOwnerFiller(&plainFiller{name: "plain-2"})
	scan(t, b)
	fresh := ownersOf(scan(t, b), "plain-2", nil)
	for _, id := range ids {
		if !slices.Equal(o6[id], fresh[id]) {
			t.Errorf("program %d: owners %+v, a fresh agent's %+v", id, o6[id], fresh[id])
		}
	}
}
