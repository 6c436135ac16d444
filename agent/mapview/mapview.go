// Package mapview builds what the API's /v1/maps and `bpfleet maps` show of
// a snapshot's maps: each map with the programs that use it and, through
// them, their owners and pods, filtered and sorted. It consumes agent's
// types, like agent/history, so the two consumers cannot drift apart.
package mapview

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// List is the answer of /v1/maps and the document of `bpfleet maps -o json`.
type List struct {
	Seq  uint64        `json:"seq"`
	Time time.Time     `json:"time"`
	Scan agent.MapScan `json:"scan"`
	// Total is the maps in the snapshot before filtering.
	Total int `json:"total"`
	// MemoryBytes is the listed maps' memory, each map counted once.
	MemoryBytes uint64 `json:"memory_bytes"`
	Maps        []Map  `json:"maps"`
}

// Map is one map with the programs that use it.
type Map struct {
	agent.Map
	// Users are the programs of ProgramIDs still in the snapshot, in the
	// same order.
	Users []User `json:"users"`
}

// User is a program that uses a map, with its owners in brief.
type User struct {
	ProgID   uint32     `json:"prog_id"`
	ProgName string     `json:"prog_name"`
	Owners   []MapOwner `json:"owners"`
}

// MapOwner is the API's MapOwner: the part of an owner (agent.Owner) that
// says whose a map is, the process, its container and its pod. A brief of
// the one owner type for the maps view, not an owner type of its own: the
// maps JSON carries these fields only.
type MapOwner struct {
	PID          int    `json:"pid"`
	Comm         string `json:"comm"`
	ContainerID  string `json:"container_id,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	WorkloadKind string `json:"workload_kind,omitempty"`
	WorkloadName string `json:"workload_name,omitempty"`
}

// Sorts are the orders a list can have: all but id and name are
// descending, maps without the figure last.
var Sorts = map[string]func(a, b *Map) int{
	"id":       func(a, b *Map) int { return cmp.Compare(a.ID, b.ID) },
	"name":     func(a, b *Map) int { return cmp.Compare(a.Name, b.Name) },
	"memory":   func(a, b *Map) int { return descNil(a.MemoryBytes, b.MemoryBytes) },
	"entries":  func(a, b *Map) int { return descNil(a.Entries, b.Entries) },
	"fullness": func(a, b *Map) int { return descNil(a.Fullness, b.Fullness) },
	"evictions": func(a, b *Map) int {
		if c := descNil(a.EvictionsPerSecond, b.EvictionsPerSecond); c != 0 {
			return c
		}
		return descNil(a.Evictions, b.Evictions)
	},
	"refused": func(a, b *Map) int {
		if c := descNil(a.RefusedUpdatesPerSecond, b.RefusedUpdatesPerSecond); c != 0 {
			return c
		}
		return descNil(a.RefusedUpdates, b.RefusedUpdates)
	},
}

// descNil orders larger values first and nil after every value.
func descNil[T cmp.Ordered](a, b *T) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	return cmp.Compare(*b, *a)
}

// Filter selects and orders maps; the zero value keeps every map in id
// order.
type Filter struct {
	Type string // exact map type, e.g. hash, ringbuf
	Name string // name contains
	// ProgID keeps the maps that program uses.
	ProgID uint32
	// Pod and Namespace keep maps used by a program with an owner there.
	Pod, Namespace string
	Sort           string // a key of Sorts; empty: id
	Limit          int    // at most this many; 0: all
}

func (f *Filter) match(m *Map) bool {
	if f.Type != "" && m.Type != f.Type {
		return false
	}
	if f.Name != "" && !strings.Contains(m.Name, f.Name) {
		return false
	}
	if f.ProgID != 0 && !slices.Contains(m.ProgramIDs, f.ProgID) {
		return false
	}
	if f.Pod == "" && f.Namespace == "" {
		return true
	}
	for _, u := range m.Users {
		for _, o := range u.Owners {
			if (f.Pod == "" || o.PodName == f.Pod) && (f.Namespace == "" || o.PodNamespace == f.Namespace) {
				return true
			}
		}
	}
	return false
}

// Build lists the maps of s that f keeps, with their users, in f's order
// (ties by id). Maps of the list share nothing writable with s.
func Build(s *agent.Snapshot, f Filter) List {
	progs := make(map[uint32]*agent.ProgramStat, len(s.Programs))
	for _, p := range s.Programs {
		progs[p.ID] = p
	}
	out := List{Seq: s.Seq, Time: s.Time, Scan: s.MapScan, Total: len(s.Maps), Maps: []Map{}}
	for i := range s.Maps {
		m := Map{Map: *s.Maps[i], Users: []User{}}
		for _, id := range m.ProgramIDs {
			if p := progs[id]; p != nil {
				m.Users = append(m.Users, user(p))
			}
		}
		if f.match(&m) {
			out.Maps = append(out.Maps, m)
		}
	}
	if by := Sorts[f.Sort]; by != nil {
		slices.SortStableFunc(out.Maps, func(a, b Map) int {
			if c := by(&a, &b); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
	}
	if f.Limit > 0 && len(out.Maps) > f.Limit {
		out.Maps = out.Maps[:f.Limit]
	}
	// Each map once: ids are unique in a snapshot.
	for i := range out.Maps {
		if mb := out.Maps[i].MemoryBytes; mb != nil {
			out.MemoryBytes += *mb
		}
	}
	return out
}

func user(p *agent.ProgramStat) User {
	u := User{ProgID: p.ID, ProgName: p.Name, Owners: make([]MapOwner, len(p.Owners))}
	for i, o := range p.Owners {
		u.Owners[i] = MapOwner{PID: o.PID, Comm: o.Comm, ContainerID: o.ContainerID, PodNamespace: o.PodNamespace, PodName: o.PodName,
			WorkloadKind: o.WorkloadKind, WorkloadName: o.WorkloadName}
	}
	return u
}
