//go:build bench

package fleetsim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
)

// ruleCost is one rule's last evaluation time, from Prometheus'
// /api/v1/rules: which rules a group's time goes to.
type ruleCost struct {
	Group, Name string
	Seconds     float64
}

// dearestRules is the k rules with the longest evaluation, dearest first:
// each rule's median of n reads of its last evaluation a second apart
// (Prometheus evaluates every second here), as one evaluation on a busy
// machine says little.
func dearestRules(t testing.TB, prom *backends.Prometheus, k, n int) []ruleCost {
	t.Helper()
	times := map[[2]string][]float64{}
	for i := range n {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond)
		}
		for _, c := range lastRuleTimes(t, prom) {
			key := [2]string{c.Group, c.Name}
			times[key] = append(times[key], c.Seconds)
		}
	}
	var out []ruleCost
	for key, v := range times {
		slices.Sort(v)
		out = append(out, ruleCost{key[0], key[1], v[len(v)/2]})
	}
	slices.SortFunc(out, func(a, b ruleCost) int {
		switch {
		case a.Seconds > b.Seconds:
			return -1
		case a.Seconds < b.Seconds:
			return 1
		}
		return strings.Compare(a.Group+a.Name, b.Group+b.Name)
	})
	return out[:min(k, len(out))]
}

// lastRuleTimes is every rule's last evaluation time. Rules of one name
// (none in the shipped file today) are summed.
func lastRuleTimes(t testing.TB, prom *backends.Prometheus) []ruleCost {
	t.Helper()
	body, err := httpGet("http://" + prom.Addr + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Data struct {
			Groups []struct {
				Name  string
				Rules []struct {
					Name           string
					EvaluationTime float64
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/api/v1/rules: %v", err)
	}
	var out []ruleCost
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			out = append(out, ruleCost{g.Name, rule.Name, rule.EvaluationTime})
		}
	}
	return out
}
