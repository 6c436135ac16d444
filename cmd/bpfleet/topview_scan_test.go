package main

import (
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/agent"
)

func TestScanLabel(t *testing.T) {
	long := strings.Repeat("é", 100)
	for _, c := range []struct {
		st   agent.ScanStats
		want string
	}{
		{agent.ScanStats{Source: agent.ScanSourceIterator}, "scan: iterator"},
		{agent.ScanStats{Source: agent.ScanSourceSyscall, FallbackReason: "no iter"}, "scan: syscall (no iter)"},
		{agent.ScanStats{Source: agent.ScanSourceSyscall, FallbackReason: long}, "scan: syscall (" + strings.Repeat("é", 59) + "…)"},
	} {
		if got := scanLabel(&c.st); got != c.want {
			t.Errorf("scanLabel(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}
