package config

import "testing"

func TestParseMetricsLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want MetricsLevel
		err  bool
	}{
		{"program", LevelProgram, false},
		{"workload", LevelWorkload, false},
		{"owner", LevelOwner, false},
		{"attach-type", LevelAttachType, false},
		{"programs", 0, true},
		{"", 0, true},
	} {
		got, err := ParseMetricsLevel(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseMetricsLevel(%q) = %v, %v", tc.in, got, err)
		}
	}
}
