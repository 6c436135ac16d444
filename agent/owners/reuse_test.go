package owners

import (
	"cmp"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
)

func sameSlice(a, b []Owner) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// TestScanReusesUnchangedOwners: a program whose holders did not change
// gets the very slice of the last scan, one whose holders changed (a new
// holder, a holder gone, a new program) a new one, a program no longer
// held none; no slice handed out is written again; and every answer equals
// a fresh Scanner's.
func TestScanReusesUnchangedOwners(t *testing.T) {
	progs := make([]*ebpf.Program, 4)
	ids := make([]uint32, 4)
	for i := range progs {
		progs[i], ids[i] = loadProg(t, ebpf.SocketFilter)
	}
	// progs[1] is held by a child too, until it exits.
	child := startHolder(t, progs[1])
	s := NewScanner("", nil)
	r, err := s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	first := map[uint32][]Owner{}
	copies := map[uint32][]Owner{}
	for _, id := range ids {
		first[id] = r.Programs[id]
		copies[id] = slices.Clone(r.Programs[id])
		if ownerByPID(first[id], os.Getpid()) == nil {
			t.Fatalf("program %d: the test process is not among its owners %+v", id, first[id])
		}
	}
	if ownerByPID(first[ids[1]], child.Process.Pid) == nil {
		t.Fatalf("program %d: the child %d is not among its owners %+v", ids[1], child.Process.Pid, first[ids[1]])
	}

	// Changes: progs[1] loses the child, progs[2] gains one, progs[3] is
	// unloaded and another program loaded; progs[0] stays as it was.
	child.Process.Kill()
	child.Wait()
	child2 := startHolder(t, progs[2])
	progs[3].Close()
	_, newID := loadProg(t, ebpf.SocketFilter)

	r, err = s.Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSlice(r.Programs[ids[0]], first[ids[0]]) {
		t.Errorf("program %d: unchanged holders, yet a new slice %+v (was %+v)", ids[0], r.Programs[ids[0]], first[ids[0]])
	}
	for _, id := range ids[1:3] {
		if sameSlice(r.Programs[id], first[id]) {
			t.Errorf("program %d: holders changed, yet the same slice %+v", id, r.Programs[id])
		}
	}
	if got := r.Programs[ids[1]]; ownerByPID(got, child.Process.Pid) != nil || ownerByPID(got, os.Getpid()) == nil {
		t.Errorf("program %d after its other holder exited: owners %+v", ids[1], got)
	}
	if got := r.Programs[ids[2]]; ownerByPID(got, child2.Process.Pid) == nil || ownerByPID(got, os.Getpid()) == nil {
		t.Errorf("program %d after a child took it: owners %+v", ids[2], got)
	}
	if got, ok := r.Programs[ids[3]]; ok {
		t.Errorf("unloaded program %d still has owners %+v", ids[3], got)
	}
	if ownerByPID(r.Programs[newID], os.Getpid()) == nil {
		t.Errorf("new program %d: owners %+v", newID, r.Programs[newID])
	}
	for _, id := range ids {
		if !slices.Equal(first[id], copies[id]) {
			t.Errorf("program %d: a slice handed out was written: %+v, was %+v", id, first[id], copies[id])
		}
	}
	// The same answers as a scanner without history, for the programs
	// this test holds (other processes on the machine may change theirs
	// between the two scans).
	fresh, err := NewScanner("", nil).Scan(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids[:3:3], newID) {
		if !slices.Equal(r.Programs[id], fresh.Programs[id]) {
			t.Errorf("program %d: owners %+v, a fresh scanner's %+v", id, r.Programs[id], fresh.Programs[id])
		}
	}
}

// sortHoldings leaves holdings in holdingOrder, the same holdings, whatever
// order the source gave: pid order with a process's links before its
// programs (an agent's own iterators), out of pid order (a thread with a
// file table of its own), random.
func TestSortHoldings(t *testing.T) {
	agentPID := []Holding{
		{PID: 1, FD: 3, ProgID: 10},
		{PID: 7, FD: 3, ProgID: 20, LinkID: 5}, {PID: 7, FD: 4, ProgID: 21}, {PID: 7, FD: 5, ProgID: 20}, {PID: 7, FD: 6, ProgID: 22, LinkID: 2},
		{PID: 9, FD: 3, ProgID: 30}, {PID: 9, FD: 4, ProgID: 31},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]Holding, 200)
	for i := range random {
		random[i] = Holding{PID: rng.Int32N(20), FD: int32(i), ProgID: rng.Uint32N(50)}
		if rng.IntN(3) == 0 {
			random[i].LinkID = rng.Uint32N(10) + 1
		}
	}
	for _, tc := range []struct {
		name string
		in   []Holding
	}{
		{"empty", nil},
		{"one", []Holding{{PID: 4, ProgID: 1}}},
		{"pid order, links first", agentPID},
		{"out of pid order", append(slices.Clone(agentPID[5:]), agentPID[:5]...)},
		{"random", random},
	} {
		got := slices.Clone(tc.in)
		sortHoldings(got)
		if !slices.IsSortedFunc(got, holdingOrder) {
			t.Errorf("%s: not in holding order: %+v", tc.name, got)
		}
		byAll := func(a, b Holding) int {
			return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.FD, b.FD), cmp.Compare(a.ProgID, b.ProgID), cmp.Compare(a.LinkID, b.LinkID))
		}
		want := slices.SortedFunc(slices.Values(tc.in), byAll)
		if !slices.Equal(slices.SortedFunc(slices.Values(got), byAll), want) {
			t.Errorf("%s: holdings changed: %+v, from %+v", tc.name, got, tc.in)
		}
	}
}
