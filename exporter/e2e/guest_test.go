package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/kernels/exportcauses"
)

const (
	// guestEntry is the kernel-matrix entry the guest boots: a kernel whose
	// miss watcher explains misses (test/kernels/expect lists where).
	guestEntry = "sid-amd64"
	// guestHostAddr is the host's loopback as a guest on qemu's user-mode
	// network sees it (the harness's -net), where the backends listen.
	guestHostAddr = "10.0.2.2"
)

// TestGuestMissCauses: the miss causes reach the backends. The host's
// kernel may refuse the watcher's hardware watchpoints (then every miss is
// unexplained, which TestAgentToPrometheusAndJaeger checks), so the agent
// runs in a kernel-matrix guest, where they are explained: the real bpfleet
// agent, in a real kernel, watching the recursion canary while the guest
// provokes misses, exporting over OTLP/HTTP to this Prometheus and Jaeger.
// Prometheus must hold a recursion series of exactly the misses provoked,
// the causes adding up to the kernel's count, and Jaeger an episode span
// carrying the causes, down to its stack events.
func TestGuestMissCauses(t *testing.T) {
	prom := backends.StartPrometheus(t)
	jg := backends.StartJaeger(t)
	metricsURL := guestURL(prom.Addr, strings.TrimPrefix(prom.OTLPEndpoint(), "http://"+prom.Addr))
	tracesURL := guestURL(jg.OTLPHTTP, "/v1/traces")

	got := runGuest(t, guestEntry, "./test/kernels/exportcauses", "TestExportCauses", exportcauses.MetricPrefix,
		exportcauses.MetricsEnv+"="+metricsURL, exportcauses.TracesEnv+"="+tracesURL)
	for _, k := range []string{"program_id", "instance", "os_version", "provoked", "kernel_misses"} {
		if got[k] == "" {
			t.Fatalf("the guest reported no %s (its output above)", k)
		}
	}
	sel := fmt.Sprintf(`bpf_program_recursion_misses_total{instance=%q, bpf_program_id=%q}`, got["instance"], got["program_id"])

	// The series of each cause: recursion is every miss provoked while the
	// program was watched, and the causes add up to the kernel's count.
	var causes map[string]float64
	err := backends.Eventually(60*time.Second, func() error {
		ss, err := prom.Query(context.Background(), sel)
		if err != nil {
			return err
		}
		causes = map[string]float64{}
		var sum float64
		for _, s := range ss {
			c, ok := s.Labels["bpf_miss_cause"]
			if !ok {
				c = "(no bpf_miss_cause label)"
			}
			causes[c] += s.Value
			sum += s.Value
		}
		if causes["recursion"] != num(got["provoked"]) || sum != num(got["kernel_misses"]) {
			return fmt.Errorf("%s by cause %v (sum %v); want recursion %s, the misses the guest provoked, and a sum of %s, its kernel's count",
				sel, causes, sum, got["provoked"], got["kernel_misses"])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus, program %s of %s: %v", got["program_id"], got["instance"], causes)

	// The episode span: each cause's count adding up to its misses, the
	// dominant cause recursion, and the sampled stacks as events.
	var sp backends.Span
	err = backends.Eventually(30*time.Second, func() error {
		spans, err := jg.Spans(context.Background(), "bpfleet-agent", nil)
		if err != nil {
			return err
		}
		for _, s := range spans {
			if s.OperationName == "bpf.recursion_miss" && num(s.Tags["bpf.program.id"]) == num(got["program_id"]) &&
				s.Process["service.instance.id"] == got["instance"] {
				sp = s
				return nil
			}
		}
		return fmt.Errorf("no bpf.recursion_miss span of program %s from %s among %d spans", got["program_id"], got["instance"], len(spans))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Jaeger span %s: %v; events %v; process %v", sp.OperationName, sp.Tags, sp.EventAttrs, sp.Process)
	var sum float64
	var missing []string
	for _, c := range []string{"recursion", "interrupt", "preempted", "nested", "unexplained"} {
		k := "bpf.miss.cause." + c
		if _, ok := sp.Tags[k]; !ok {
			missing = append(missing, k)
		}
		sum += num(sp.Tags[k])
	}
	switch r := sp.Tags["bpf.miss.cause.recursion"]; {
	case len(missing) > 0:
		t.Errorf("episode span has no %v (every cause's count, zeros too)", missing)
	case num(r) != num(got["provoked"]) || sum != num(sp.Tags["bpf.episode.misses"]) || sp.Tags["bpf.miss.cause"] != "recursion":
		t.Errorf("episode span: recursion %v (want %s, the misses provoked), causes adding up to %v (want its %v misses), dominant %v (want recursion)",
			r, got["provoked"], sum, sp.Tags["bpf.episode.misses"], sp.Tags["bpf.miss.cause"])
	}
	var stacked float64
	for _, ev := range sp.EventAttrs {
		if ev["event"] != "bpf.miss.stack" {
			continue
		}
		if ev["bpf.miss.cause"] != "recursion" || !strings.HasPrefix(fmt.Sprint(ev["bpf.miss.stack"]), "bpf_prog_inc_misses_counter") {
			t.Errorf("stack event %v: want a recursion whose stack starts at the miss counter", ev)
		}
		stacked += num(ev["bpf.episode.misses"])
	}
	if stacked != num(got["provoked"]) {
		t.Errorf("stack events count %v misses, want the %s sampled", stacked, got["provoked"])
	}
	if v := sp.Process["os.version"]; v != got["os_version"] {
		t.Errorf("span resource os.version %v, want the guest's %s", v, got["os_version"])
	}
}

// guestURL is the host's addr as the guest reaches it, with path.
func guestURL(addr, path string) string {
	_, port, _ := strings.Cut(addr, ":")
	return "http://" + guestHostAddr + ":" + port + path
}

// runGuest boots the matrix entry with the real agent in it (/bin/bpfleet)
// and a user-mode network to this host, runs test of pkg there with env
// (KEY=value) and returns the "metric <prefix>name=value" lines it logged,
// by name. The test's skip skips the caller with the guest kernel's words.
func runGuest(t *testing.T, entry, pkg, test, prefix string, env ...string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("the guest needs qemu (scripts/install-deps.sh installs it): %v", err)
	}
	// The harness fetches the kernel through its cache (BPFLEET_CACHE, as
	// the matrix does), builds the guest's test and agent, and boots it.
	// A healthy boot takes under a minute; 3 min each bounds the harness's
	// retries of a guest that died with no test failing.
	args := []string{"run", "./test/kernels", "-kernels", entry, "-packages", pkg, "-run", "^" + test + "$",
		"-cmd", "none", "-agent", "-net", "-timeout", "3m", "-work", t.TempDir()}
	for _, e := range env {
		args = append(args, "-env", e)
	}
	start := time.Now()
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	t.Logf("guest run (%v):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("the guest run failed: %v (its output above)", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], prefix) {
			got[strings.TrimPrefix(f[0], prefix)] = f[1]
		}
		if _, reason, ok := strings.Cut(line, "SKIP "+test+": "); ok {
			t.Skipf("the guest's kernel: %s", reason)
		}
	}
	return got
}
