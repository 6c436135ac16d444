package chart

import (
	"testing"
)

// The stats mode reaches the agent's flags: sampled by default with its
// window and period, always and off without them.
func TestStatsModeArgs(t *testing.T) {
	for _, c := range []struct {
		values string
		want   []string
		absent []string
	}{
		{"", []string{"--stats=sampled", "--stats-window=1s", "--stats-period=10s"}, nil},
		{`agent: {stats: {window: 2s, period: 30s}}`, []string{"--stats=sampled", "--stats-window=2s", "--stats-period=30s"}, nil},
		{`agent: {stats: {mode: always}}`, []string{"--stats=always"}, []string{"--stats-window=1s", "--stats-period=10s"}},
		{`agent: {stats: {mode: "off"}}`, []string{"--stats=off"}, []string{"--stats-window=1s"}},
	} {
		r, err := render(t, c.values)
		if err != nil {
			t.Fatalf("values %q: %v", c.values, err)
		}
		ctr := r.DaemonSet.Spec.Template.Spec.Containers[0]
		for _, a := range c.want {
			if !hasArg(ctr, a) {
				t.Errorf("values %q: args %v lack %s", c.values, ctr.Args, a)
			}
		}
		for _, a := range c.absent {
			if hasArg(ctr, a) {
				t.Errorf("values %q: args %v have %s", c.values, ctr.Args, a)
			}
		}
	}
}
