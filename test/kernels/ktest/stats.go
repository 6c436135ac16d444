package ktest

import (
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MainWithStats runs a kernel-matrix test binary holding BPF_ENABLE_STATS
// for its whole run (never the sysctl), so that run_cnt/run_time_ns
// accrue; *on says whether the kernel granted it. name prefixes the one
// line printed when it did not. It does not return.
func MainWithStats(m *testing.M, name string, on *bool) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err == nil {
		*on = true
	} else {
		fmt.Fprintf(os.Stderr, "%s: BPF_ENABLE_STATS: %v (run counts not checked)\n", name, err)
	}
	code := m.Run()
	if stats != nil {
		stats.Close()
	}
	os.Exit(code)
}
