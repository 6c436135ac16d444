package main

import (
	"fmt"
	"strings"
)

// Entry is one kernel of the matrix: a Debian suite, an architecture and the
// metapackage whose dependency names the newest kernel of that flavour.
type Entry struct {
	Name  string
	Suite string // Debian suite: bookworm, trixie, sid
	Arch  string // Debian architecture: amd64, arm64
	// Meta is the flavour's metapackage (linux-image-cloud-amd64); apt
	// resolves it to the current ABI package, so no version is written here.
	Meta string
}

// Matrix is every entry, in order; `make test-kernels` runs them all.
var Matrix = []Entry{
	{Name: "bookworm-amd64", Suite: "bookworm", Arch: "amd64", Meta: "linux-image-cloud-amd64"},
	{Name: "trixie-amd64", Suite: "trixie", Arch: "amd64", Meta: "linux-image-amd64"},
	{Name: "sid-amd64", Suite: "sid", Arch: "amd64", Meta: "linux-image-amd64"},
	{Name: "sid-rt-amd64", Suite: "sid", Arch: "amd64", Meta: "linux-image-rt-amd64"},
	{Name: "sid-arm64", Suite: "sid", Arch: "arm64", Meta: "linux-image-arm64"},
	// Debian 11's 5.10, the oldest kernel bpfleet is tried on: no
	// recursion_misses, no stats iterator, no perf_event links.
	{Name: "bullseye-amd64", Suite: "bullseye", Arch: "amd64", Meta: "linux-image-cloud-amd64"},
}

// GOARCH is the Go architecture of the entry's guest.
func (e Entry) GOARCH() string { return e.Arch }

// selectEntries picks the entries named in a comma or space separated list;
// an empty list means all of them.
func selectEntries(list string) ([]Entry, error) {
	names := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' })
	if len(names) == 0 {
		return Matrix, nil
	}
	var out []Entry
	for _, n := range names {
		found := false
		for _, e := range Matrix {
			if e.Name == n {
				out = append(out, e)
				found = true
			}
		}
		if !found {
			var all []string
			for _, e := range Matrix {
				all = append(all, e.Name)
			}
			return nil, fmt.Errorf("unknown kernel %q: choose from %s", n, strings.Join(all, ", "))
		}
	}
	return out, nil
}
