package agent

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/probes/profiler"
)

func TestProfileMatch(t *testing.T) {
	p := &Program{ID: 42, Name: "xdp_fw", Tag: "abcd", AttachType: "xdp", Owners: []Owner{{Comm: "cilium-agent", ContainerID: "0123456789abcdef0123", PodName: "cilium-x"}}}
	for _, c := range []struct {
		sel  string
		want bool
	}{
		{"42", true}, {"id:42", true}, {"id:43", false}, {"xdp_fw", true}, {"name:xdp_fw", true}, {"name:xdp", false},
		{"tag:abcd", true}, {"attach:xdp", true}, {"attach:tc", false}, {"owner:cilium-agent", true},
		{"owner:0123456789ab", true}, {"owner:cilium-x", true}, {"cilium-agent", true}, {"other", false},
	} {
		if got := profileMatch([]string{c.sel}, p); got != c.want {
			t.Errorf("%q matches %v, want %v", c.sel, got, c.want)
		}
	}
}

// The agent profiles a selected program: where the kernel refuses tracing
// BPF programs (the CI host) the snapshot says so in one line, on the
// program and in Degraded; where it allows, the runs are counted.
func TestAgentProfilesSelected(t *testing.T) {
	tt, err := profiler.LoadTimedTarget(10)
	if err != nil {
		t.Skipf("timed target: %v", err)
	}
	defer tt.Close()
	id := scantest.ProgID(t, tt.Prog)
	a := newTestAgentWith(t, Config{Profile: []string{"id:" + strconv.Itoa(int(id))}, NoIterator: true})
	s1 := scan(t, a)
	frozen, _ := json.Marshal(s1)
	if _, err := tt.Fire(100); err != nil {
		t.Fatal(err)
	}
	s := scan(t, a)
	if again, _ := json.Marshal(s1); string(again) != string(frozen) {
		t.Error("the first snapshot changed when the second set profiles")
	}
	p := findProg(s, id)
	if p == nil || p.Profile == nil {
		t.Fatalf("program %d: no profile in the snapshot", id)
	}
	for i := range s.Programs {
		if s.Programs[i].ID != id && s.Programs[i].Profile != nil {
			t.Errorf("program %d (%s) profiled but not selected", s.Programs[i].ID, s.Programs[i].Name)
		}
	}
	if p.Profile.Error != "" {
		n := 0
		for _, d := range s.Degraded {
			if strings.Contains(d, "cannot profile program "+strconv.Itoa(int(id))) {
				n++
			}
		}
		if n != 1 || strings.Contains(p.Profile.Error, "\n") {
			t.Errorf("refusal %q: %d Degraded lines, want exactly one line", p.Profile.Error, n)
		}
		t.Skipf("kernel refuses: %s", p.Profile.Error)
	}
	if p.Profile.Runs != 100 || p.Profile.IntervalRuns != 100 {
		t.Errorf("profiled %d runs (%d in the interval), want 100", p.Profile.Runs, p.Profile.IntervalRuns)
	}
}
