package rules

import (
	"os/exec"
	"testing"

	"github.com/bpfleet/bpfleet/exporter/internal/backends"
)

const rulesFile = "../../charts/bpfleet/files/bpfleet.rules.yaml"

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(backends.Bin(t, "promtool", backends.PrometheusVersion), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", "--lint=all", "--lint-fatal", rulesFile)
}

func TestRulesUnit(t *testing.T) {
	promtool(t, "test", "rules", "bpfleet.rules_test.yaml")
}
