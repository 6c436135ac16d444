package exporter

import (
	"slices"
	"testing"
)

func TestPrometheusLabels(t *testing.T) {
	for _, c := range []struct {
		name     string
		level    Level
		has, not string // a label the set must have, one it must not
		err      bool
	}{
		{"bpf.map.evictions", LevelProgram, "bpf_map_id", "bpf.map.id", false},
		{"bpf.map.evictions", LevelWorkload, "process_executable_name", "bpf_map_id", false},
		{"bpf.program.recursion_misses", LevelWorkload, "bpf_miss_cause", "bpf_program_id", false},
		{"bpf.map.evictions", LevelAttachType, "", "", true}, // not exported at that level
		{"bpf.map.evicted", LevelProgram, "", "", true},      // no such metric
	} {
		got, err := PrometheusLabels(c.name, c.level)
		if (err != nil) != c.err {
			t.Errorf("%s at %v: error %v, want error %v", c.name, c.level, err, c.err)
			continue
		}
		if !c.err && (!slices.Contains(got, c.has) || slices.Contains(got, c.not)) {
			t.Errorf("%s at %v: %v, want %s and no %s", c.name, c.level, got, c.has, c.not)
		}
	}
}
