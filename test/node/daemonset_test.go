package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/bpfleet/bpfleet/internal/ociimage"
	"github.com/bpfleet/bpfleet/probes/misswatch"
	"github.com/bpfleet/bpfleet/probes/progstats"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/kube"
	"github.com/bpfleet/bpfleet/test/registry"
	"github.com/bpfleet/bpfleet/test/testimage"
)

const (
	releaseName = "bpfleet"
	releaseNS   = "bpfleet-system"
	imageTag    = "node-test"
	appsNS      = "apps"
	// interval is the chart's default scan (and export) interval.
	interval = 10 * time.Second
	// exportJitter is how far apart two consecutive exports of an agent
	// that missed none may be beyond interval at least: a point's
	// timestamp is taken after its scan, whose length (a few ms) varies,
	// so steady points are one interval give or take that (9.992 s to
	// 10.002 s measured on an idle machine; 9.891 s to 10.111 s on a busy
	// one, hence checkRollout widens it to the old pod's own spread before
	// the change). A missed or late export adds seconds.
	exportJitter = 20 * time.Millisecond
	// cacheDir is where the chart's pod keeps the agent's CO-RE cache.
	cacheDir = "/tmp/bpfleet"
)

// capBits are the capability numbers (linux/capability.h) of the ones the
// chart may add.
var capBits = map[corev1.Capability]uint{
	"DAC_READ_SEARCH": 2, "NET_ADMIN": 12, "SYS_PTRACE": 19, "SYS_ADMIN": 21, "SYSLOG": 34, "PERFMON": 38, "BPF": 39,
}

// TestNode runs the DaemonSet for real: bpfleet's image built by `make
// image`, pushed to a registry and pulled by containerd, the chart
// installed with its defaults (image and OTLP endpoint aside) into a
// cluster whose one node is a kubelet on this host, the agent in its pod
// with exactly the chart's privileges exporting through a Collector to
// Prometheus and Jaeger, and a Deployment whose pod loads a BPF program
// with known misses.
func TestNode(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	reg, stopReg := registry.Start()
	t.Cleanup(stopReg)

	// The images, as users ship them: `make image PUSH=...` for bpfleet.
	root := repoRoot()
	mk := exec.Command("make", "-C", root, "image", "PUSH="+reg+"/bpfleet:"+imageTag)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	if _, err := testimage.PushPause(ctx, reg+"/pause:3.10"); err != nil {
		t.Fatalf("pause image: %v", err)
	}
	idx, err := testimage.Program(ctx, "github.com/bpfleet/bpfleet/test/node/canary", "-per", "5")
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.Push(ctx, reg+"/canary:1", idx); err != nil {
		t.Fatalf("canary image: %v", err)
	}
	t.Logf("images built and pushed to %s in %s", reg, time.Since(start).Round(time.Millisecond))

	n := startNode(t, reg)
	cs := n.Admin(t)

	// Every resource attribute a label: series identity changes with any
	// of them, as in backends that keep them all.
	prom := backends.StartPrometheusPromotingAll(t)
	jg := backends.StartJaeger(t)
	col := backends.StartCollector(t, prom, jg)
	forward(t, otlpIP+":4318", col.OTLPHTTP)

	installStart := time.Now()
	vals := map[string]any{
		"image": map[string]any{"repository": reg + "/bpfleet", "tag": imageTag},
		"otel":  map[string]any{"endpoint": "http://" + otlpIP + ":4318"},
	}
	helmCfg := installChart(t, n, vals)
	agentPod := waitAgentPod(t, cs, "")
	t.Logf("agent pod %s Running and Ready %s after helm install", agentPod.Name, time.Since(installStart).Round(time.Millisecond))

	ds, err := cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentPID := podPID(t, agentPod, "bpfleet-agent")

	t.Run("privileges", func(t *testing.T) { testPrivileges(t, n, ds, agentPod, agentPID) })
	t.Run("calibration", func(t *testing.T) { testCalibration(t, prom, root) })
	t.Run("deployment", func(t *testing.T) { testDeployment(t, n, cs, prom, jg, reg) })
	t.Run("core-cache", func(t *testing.T) { testCoreCache(t, n, cs, agentPod) })
	t.Run("rollout-restart", func(t *testing.T) { testRolloutRestart(t, cs, prom) })
	t.Run("upgrade-rollback", func(t *testing.T) { testUpgradeRollback(t, cs, prom, helmCfg, vals, reg) })
	t.Run("frozen-agent", func(t *testing.T) { testFrozenAgent(t, cs) })
	t.Run("upgrade-from-0.1.0", func(t *testing.T) { testUpgradeFromRelease(t, n, cs, prom, helmCfg, vals, reg) })
	t.Logf("node test took %s", time.Since(start).Round(time.Second))
}

// installChart runs `helm install bpfleet charts/bpfleet -n bpfleet-system`
// with vals through the Helm library, as the cluster admin, and returns
// the Helm configuration for upgrades and rollbacks of the release.
func installChart(t *testing.T, n *node, vals map[string]any) *action.Configuration {
	t.Helper()
	cs := n.Admin(t)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, cfg, err := n.HelmInstall(releaseNS, releaseName, vals, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitAgentPod waits for the DaemonSet's pod on the node, Running and
// Ready, other than notUID.
func waitAgentPod(t *testing.T, cs *kubernetes.Clientset, notUID types.UID) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	kube.Eventually(t, 4*time.Minute, "the agent pod Running and Ready", func() error {
		pods, err := cs.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID == notUID || p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodRunning && podReady(p) {
				pod = p
				return nil
			}
			states = append(states, podState(p))
		}
		return fmt.Errorf("agent pods: %v", states)
	})
	return pod
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says where a pod is, with its containers' waiting or
// terminated reasons, for failure messages.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s", p.Name, p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf(" %s=%s (%s)", c.Type, c.Status, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(" %s waiting %s: %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(" %s terminated %s (exit %d): %s", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
		}
	}
	return s
}

// podLog is what the kubelet logged of the pod's container in its run
// restart (0 for the first), "" until there is some.
func podLog(n *node, p *corev1.Pod, container string, restart int32) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "pod-logs", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container, fmt.Sprintf("%d.log", restart)))
	return string(b)
}

// podPID is the host pid of the process comm in the pod's first container.
func podPID(t *testing.T, p *corev1.Pod, comm string) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	var pid int
	kube.Eventually(t, 30*time.Second, "the process "+comm+" of pod "+p.Name, func() error {
		var err error
		pid, err = containerPID(id, comm)
		return err
	})
	return pid
}

// testPrivileges: the agent process has exactly the chart's capabilities
// (effective and bounding set), its seccomp filter and no_new_privs, as
// the host's /proc says.
func testPrivileges(t *testing.T, n *node, ds *appsv1.DaemonSet, pod *corev1.Pod, pid int) {
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	var want uint64
	for _, c := range sc.Capabilities.Add {
		b, ok := capBits[c]
		if !ok {
			t.Fatalf("the chart adds %s, which this test does not know", c)
		}
		want |= 1 << b
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Fatalf("the chart does not drop ALL: %v", sc.Capabilities.Drop)
	}
	st, err := procStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent pid %d: CapEff %s CapBnd %s CapPrm %s CapInh %s CapAmb %s Seccomp %s NoNewPrivs %s",
		pid, st["CapEff"], st["CapBnd"], st["CapPrm"], st["CapInh"], st["CapAmb"], st["Seccomp"], st["NoNewPrivs"])
	for _, k := range []string{"CapEff", "CapBnd", "CapPrm"} {
		got, err := strconv.ParseUint(st[k], 16, 64)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if got != want {
			t.Errorf("%s = %#x (%d capabilities), want the chart's %#x (%d): extra %#x, missing %#x",
				k, got, bits.OnesCount64(got), want, bits.OnesCount64(want), got&^want, want&^got)
		}
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault && st["Seccomp"] != "2" {
		t.Errorf("Seccomp = %s, want 2 (filter): the chart asks for RuntimeDefault", st["Seccomp"])
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && st["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %s, want 1: the chart sets allowPrivilegeEscalation: false", st["NoNewPrivs"])
	}
	// With exactly these privileges the agent loses nothing: its start
	// line names every feature lost to a missing privilege or mount, and
	// so does the line after calibration.
	var started, calibrated string
	kube.Eventually(t, time.Minute, "the agent's start and calibration lines", func() error {
		for _, l := range strings.Split(podLog(n, pod, "agent", 0), "\n") {
			switch {
			case strings.Contains(l, `msg="agent started"`):
				started = l
			case strings.Contains(l, `msg="calibrated attach types"`):
				calibrated = l
			}
		}
		if started == "" || calibrated == "" {
			return fmt.Errorf("not in the log yet")
		}
		return nil
	})
	t.Logf("%s\n%s", started, calibrated)
	if deg := podOnlyLosses(t, started); deg != "" {
		t.Errorf("the agent lost features in its pod (%s): %s", deg, started)
	}
	if !strings.Contains(calibrated, " lost=[]") {
		t.Errorf("calibration lost attach types in the pod: %s", calibrated)
	}
}

// testCalibration: the agent in its pod scans with the iterator (no
// program fds), and its start-up calibration exported an overhead for
// every attach type `bpfleet probe` on the host (as root, every
// privilege) finds supported.
func testCalibration(t *testing.T, prom *backends.Prometheus, root string) {
	want := hostProbe(t, filepath.Join(root, "bin", "linux-"+runtime.GOARCH, "bpfleet"))
	if len(want) == 0 {
		t.Fatal("bpfleet probe on the host finds no attach type supported")
	}
	ctx := context.Background()
	sel := fmt.Sprintf(`{k8s_node_name=%q}`, nodeName)
	var got map[string]float64
	kube.Eventually(t, 2*time.Minute, "bpf_attach_type_overhead_seconds for every attach type the host supports", func() error {
		s, err := prom.Query(ctx, "bpf_attach_type_overhead_seconds"+sel)
		if err != nil {
			return err
		}
		got = map[string]float64{}
		for _, x := range s {
			got[x.Labels["bpf_attach_type"]] = x.Value
		}
		for a := range want {
			if _, ok := got[a]; !ok {
				return fmt.Errorf("host supports %s; the pod's agent exported overheads for %v", a, got)
			}
		}
		return nil
	})
	t.Logf("overhead per triggered call from the pod: %v (host supports %v)", got, want)
	src, err := prom.Query(ctx, "bpf_agent_scan_source"+sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(src) != 1 || src[0].Labels["bpf_scan_source"] != "iterator" {
		t.Errorf("bpf_agent_scan_source: %v, want the iterator", src)
	}
}

var progIDRE = regexp.MustCompile(`canary loaded prog_id=(\d+)`)

// canaryPod waits for the Deployment's running pod other than notUID and
// returns it with its program's id, read from its log.
func canaryPod(t *testing.T, n *node, cs *kubernetes.Clientset, notUID types.UID) (*corev1.Pod, uint32) {
	t.Helper()
	var pod *corev1.Pod
	var id uint32
	kube.Eventually(t, 3*time.Minute, "the canary pod running with its program loaded", func() error {
		pods, err := cs.CoreV1().Pods(appsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=canary"})
		if err != nil {
			return err
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID == notUID || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				states = append(states, podState(p))
				continue
			}
			if m := progIDRE.FindStringSubmatch(podLog(n, p, "canary", 0)); m != nil {
				v, _ := strconv.ParseUint(m[1], 10, 32)
				pod, id = p, uint32(v)
				return nil
			}
			states = append(states, p.Name+" running, no program id in its log yet")
		}
		return fmt.Errorf("canary pods: %v", states)
	})
	return pod, id
}

// kernelMisses is the program's recursion_misses as the kernel says.
func kernelMisses(id uint32) (uint64, error) {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return 0, err
	}
	defer p.Close()
	st, err := p.Stats()
	if err != nil {
		return 0, err
	}
	return st.RecursionMisses, nil
}

// testDeployment: a Deployment's pod loads the recursion canary; the
// exported workload series names it by namespace and Deployment, and
// counts no more misses than the kernel did; its replacement's new
// program continues the same series; the first pod's miss episode reaches
// Jaeger named by pod, namespace and Deployment.
func testDeployment(t *testing.T, n *node, cs *kubernetes.Clientset, prom *backends.Prometheus, jg *backends.Jaeger, reg string) {
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	labels := map[string]string{"app": "canary"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: appsNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{
						Name:  "canary",
						Image: reg + "/canary:1",
						// Loading a tracing program and its BTF.
						SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
							Drop: []corev1.Capability{"ALL"},
							Add:  []corev1.Capability{"BPF", "PERFMON"},
						}},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(appsNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, firstID := canaryPod(t, n, cs, "")
	t.Logf("canary pod %s holds program %d", first.Name, firstID)

	sel := fmt.Sprintf(`bpf_program_recursion_misses_total{k8s_node_name=%q,k8s_namespace_name=%q,k8s_workload_kind="Deployment",k8s_workload_name="canary",bpf_program_name="canary"}`, nodeName, appsNS)
	var before float64
	kube.Eventually(t, 90*time.Second, "the canary's misses in Prometheus, named by namespace and Deployment", func() error {
		s, err := prom.Query(ctx, sel)
		if err != nil {
			return err
		}
		if len(s) != 1 {
			return fmt.Errorf("%d series %v, want 1", len(s), s)
		}
		if s[0].Labels["bpf_attach_type"] != "tp_btf" || s[0].Labels["process_executable_name"] != "canary" {
			return fmt.Errorf("series %v: want attach type tp_btf, executable canary", s[0].Labels)
		}
		k, err := kernelMisses(firstID)
		if err != nil {
			return err
		}
		if s[0].Value <= 0 || s[0].Value > float64(k) {
			return fmt.Errorf("exported %v misses, kernel counted %d: want 0 < exported <= kernel", s[0].Value, k)
		}
		before = s[0].Value
		return nil
	})
	t.Logf("exported %v misses for %s", before, sel)

	// The pod replaced: a new program id, the same workload series.
	if err := cs.CoreV1().Pods(appsNS).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second, secondID := canaryPod(t, n, cs, first.UID)
	if secondID == firstID {
		t.Fatalf("the replacement pod %s holds program %d, the first pod's", second.Name, secondID)
	}
	t.Logf("replacement pod %s holds program %d", second.Name, secondID)
	kube.Eventually(t, 90*time.Second, "the workload series continuing past the replacement's misses", func() error {
		s, err := prom.Query(ctx, sel)
		if err != nil {
			return err
		}
		if len(s) != 1 {
			return fmt.Errorf("%d series, want 1", len(s))
		}
		k, err := kernelMisses(secondID)
		if err != nil {
			return err
		}
		// The series sums both programs: above the first's total by
		// some of the second's misses, never by more than all of them.
		if s[0].Value <= before || s[0].Value > before+float64(k)+5*float64(interval/time.Second) {
			return fmt.Errorf("exported %v after %v before the replacement, whose program has %d misses", s[0].Value, before, k)
		}
		return nil
	})
	ever, err := prom.Query(ctx, fmt.Sprintf("count(count_over_time(%s[15m]))", sel))
	if err != nil {
		t.Fatal(err)
	}
	if len(ever) != 1 || ever[0].Value != 1 {
		t.Errorf("series ever for the canary's workload: %v, want 1", ever)
	}

	// The first pod's episode ended with its program: a span in Jaeger.
	kube.Eventually(t, 2*time.Minute, "the first canary pod's miss episode in Jaeger", func() error {
		spans, err := jg.Spans(ctx, "bpfleet-agent", map[string]string{"k8s.pod.name": first.Name})
		if err != nil {
			return err
		}
		for _, s := range spans {
			if s.Tags["k8s.namespace.name"] == appsNS && s.Tags["k8s.workload.name"] == "canary" && s.Tags["k8s.workload.kind"] == "Deployment" {
				t.Logf("span %s: %v", s.OperationName, s.Tags)
				return nil
			}
		}
		return fmt.Errorf("%d spans for pod %s, none named by its namespace and Deployment", len(spans), first.Name)
	})
}

// testCoreCache: the agent's CO-RE cache lives in the pod's /tmp
// (emptyDir) and survives the agent's restart in the pod: the restarted
// agent loads its iterators from it without relocating against kernel BTF
// again (a relocation rewrites the cache file: a new inode).
func testCoreCache(t *testing.T, n *node, cs *kubernetes.Clientset, pod *corev1.Pod) {
	ctx := context.Background()
	pid := podPID(t, pod, "bpfleet-agent")
	files := func(pid int) map[string]uint64 {
		m := map[string]uint64{}
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/root%s", pid, cacheDir))
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				m[e.Name()] = fi.Sys().(*syscall.Stat_t).Ino
			}
		}
		return m
	}
	before := files(pid)
	if len(before) == 0 {
		t.Fatalf("no CO-RE cache files in the agent's %s", cacheDir)
	}
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	var newPID int
	kube.Eventually(t, 3*time.Minute, "the agent restarted in its pod", func() error {
		p, err := cs.CoreV1().Pods(releaseNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := p.Status.ContainerStatuses[0]
		if c.RestartCount <= restarts || c.State.Running == nil {
			return fmt.Errorf("%s", podState(p))
		}
		_, id, _ := strings.Cut(c.ContainerID, "://")
		newPID, err = containerPID(id, "bpfleet-agent")
		return err
	})
	// The restarted agent's first scan loads its iterators: wait for the
	// scan-source line in its log.
	kube.Eventually(t, time.Minute, "the restarted agent's first scan", func() error {
		if !strings.Contains(podLog(n, pod, "agent", restarts+1), "scan source") {
			return fmt.Errorf("no scan source line yet in the agent's log")
		}
		return nil
	})
	after := files(newPID)
	t.Logf("CO-RE cache before the restart %v, after %v", before, after)
	for name, ino := range before {
		if after[name] != ino {
			t.Errorf("CO-RE cache %s: inode %d before the restart, %d after: the restarted agent relocated again", name, ino, after[name])
		}
	}
}

// testRolloutRestart: `kubectl rollout restart` of the DaemonSet makes no
// second series of the node's metrics and leaves no gap in the node's
// export beyond one interval (checkRollout).
func testRolloutRestart(t *testing.T, cs *kubernetes.Clientset, prom *backends.Prometheus) {
	checkRollout(t, cs, prom, "the rollout restart", 1, func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
		if _, err := cs.AppsV1().DaemonSets(releaseNS).Patch(context.Background(), releaseName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})
}

// testUpgradeRollback: `helm upgrade` to a new image (the same bytes under
// a new tag) and new values, then `helm rollback` to the install, each
// replace the agent pod with no second series and no gap beyond one
// interval (checkRollout).
func testUpgradeRollback(t *testing.T, cs *kubernetes.Clientset, prom *backends.Prometheus, cfg *action.Configuration, vals map[string]any, reg string) {
	ctx := context.Background()
	if err := retag(ctx, reg+"/bpfleet:"+imageTag, imageTag+"-2"); err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(kube.ChartDir())
	if err != nil {
		t.Fatal(err)
	}
	upVals := map[string]any{
		"image": map[string]any{"repository": reg + "/bpfleet", "tag": imageTag + "-2"},
		"otel":  vals["otel"],
		"agent": map[string]any{"stats": map[string]any{"window": "2s"}},
	}
	checkRollout(t, cs, prom, "helm upgrade", 1, func() {
		helmUpgrade(t, cfg, ch, upVals)
	})
	ds, err := cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+imageTag+"-2") {
		t.Errorf("after helm upgrade the DaemonSet runs %s, want the tag %s-2", img, imageTag)
	}
	checkRollout(t, cs, prom, "helm rollback", 1, func() {
		helmRollback(t, cfg, 1)
	})
	if ds, err = cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+imageTag) {
		t.Errorf("after helm rollback the DaemonSet runs %s, want the tag %s", img, imageTag)
	}
}

// release010 is the commit of release 0.1.0 (chart and appVersion 0.1.0):
// main before issues 34 and 35 changed the chart.
const release010 = "9ad5a4a32beed182a0b544d0437a787bf011b67e"

// testUpgradeFromRelease: the release replaced by 0.1.0's chart and image,
// built from its commit with its own `make image`, then `helm upgrade` to
// this tree's chart and image and `helm rollback` to 0.1.0. Neither leaves
// a gap beyond one interval. 0.1.0 put its pod's name in the resource
// (host.name, bpfleet.agent.pod.name), so the upgrade renews the series
// once, as the CHANGELOG says (at most 2 series: 0.1.0's pod's and the
// node's), and the rollback brings a pod-named series back (at most 3).
func testUpgradeFromRelease(t *testing.T, n *node, cs *kubernetes.Clientset, prom *backends.Prometheus, cfg *action.Configuration, vals map[string]any, reg string) {
	ctx := context.Background()
	root := repoRoot()
	src := filepath.Join(t.TempDir(), "bpfleet-0.1.0")
	start := time.Now()
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", release010+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("release 0.1.0's commit %s is not in this clone (a shallow clone? git fetch --unshallow): %v %s", release010, err, out)
	}
	for _, args := range [][]string{
		{"clone", "-q", "--shared", "--no-checkout", root, src},
		{"-C", src, "checkout", "-q", "--detach", release010},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if out, err := exec.Command("make", "-C", src, "image", "PUSH="+reg+"/bpfleet:0.1.0").CombinedOutput(); err != nil {
		t.Fatalf("make image of 0.1.0: %v\n%s", err, out)
	}
	t.Logf("0.1.0 (%s) built and pushed in %s", release010, time.Since(start).Round(time.Millisecond))

	// 0.1.0 installed where this tree's release was.
	old := waitAgentPod(t, cs, "")
	if _, err := action.NewUninstall(cfg).Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	kube.Eventually(t, 2*time.Minute, "the uninstalled agent pod gone", func() error {
		if _, err := cs.CoreV1().Pods(releaseNS).Get(ctx, old.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("pod %s still there", old.Name)
		}
		return nil
	})
	oldVals := map[string]any{
		"image": map[string]any{"repository": reg + "/bpfleet", "tag": "0.1.0"},
		"otel":  vals["otel"],
	}
	rel, cfg, err := n.HelmInstallChart(filepath.Join(src, "charts", "bpfleet"), releaseNS, releaseName, oldVals, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chart %s-%s installed", rel.Chart.Metadata.Name, rel.Chart.Metadata.Version)
	if v := rel.Chart.Metadata.Version; v != "0.1.0" {
		t.Fatalf("commit %s holds chart %s, want 0.1.0", release010, v)
	}
	pod010 := waitAgentPod(t, cs, "")
	// checkRollout looks 3 intervals back: the uninstall's gap must be
	// older than that.
	installedAt := time.Now()
	sel := fmt.Sprintf(`bpf_agent_scans_total{k8s_node_name=%q}`, nodeName)
	kube.Eventually(t, 2*time.Minute, "0.1.0's exports over 3 intervals", func() error {
		series, err := prom.RawSamples(ctx, sel, time.Since(installedAt))
		if err != nil {
			return err
		}
		pts := 0
		for _, p := range series {
			pts += len(p)
		}
		if pts < 5 {
			return fmt.Errorf("%d points from the 0.1.0 agent %s", pts, pod010.Name)
		}
		return nil
	})

	ch, err := loader.Load(kube.ChartDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRollout(t, cs, prom, "helm upgrade from 0.1.0", 2, func() {
		helmUpgrade(t, cfg, ch, vals)
	})
	checkRollout(t, cs, prom, "helm rollback to 0.1.0", 3, func() {
		helmRollback(t, cfg, 1)
	})
	ds, err := cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":0.1.0") {
		t.Errorf("after helm rollback the DaemonSet runs %s, want 0.1.0", img)
	}
}

// helmUpgrade runs `helm upgrade bpfleet` to chart ch with vals.
func helmUpgrade(t *testing.T, cfg *action.Configuration, ch *chart.Chart, vals map[string]any) {
	t.Helper()
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = releaseNS, 2*time.Minute
	rel, err := up.Run(releaseName, ch, vals)
	if err != nil {
		t.Fatalf("helm upgrade to chart %s: %v", ch.Metadata.Version, err)
	}
	t.Logf("helm upgrade to chart %s: revision %d %s", ch.Metadata.Version, rel.Version, rel.Info.Status)
}

// helmRollback runs `helm rollback bpfleet revision`.
func helmRollback(t *testing.T, cfg *action.Configuration, revision int) {
	t.Helper()
	rb := action.NewRollback(cfg)
	rb.Version, rb.Timeout = revision, 2*time.Minute
	if err := rb.Run(releaseName); err != nil {
		t.Fatalf("helm rollback to revision %d: %v", revision, err)
	}
}

// retag gives the image ref a second tag in its registry.
func retag(ctx context.Context, ref, tag string) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	desc, err := remote.Get(r, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reading %s: %w", ref, err)
	}
	if err := remote.Tag(r.Context().Tag(tag), desc, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("tagging %s as %s: %w", ref, tag, err)
	}
	return nil
}

// checkRollout runs change, which replaces the agent pod, and checks that
// the node's export went on as one series without a gap beyond one
// interval. The rule: over the points of the node's bpf_agent_scans_total
// (every resource attribute a label) from 3 intervals before the change
// until the new pod's second export, there are at most maxSeries series
// (1 where the resource names the node alone), and sorted by
// time the largest difference between consecutive points is at most
// interval plus the jitter of the old pod's own steady exports before the
// change (at least exportJitter): every export the old pod would have made
// is made by it or by the new one.
func checkRollout(t *testing.T, cs *kubernetes.Clientset, prom *backends.Prometheus, what string, maxSeries int, change func()) {
	t.Helper()
	ctx := context.Background()
	old := waitAgentPod(t, cs, "")
	changeAt := time.Now()
	change()
	nu := waitAgentPod(t, cs, old.UID)
	t.Logf("new agent pod %s Ready %s after %s", nu.Name, time.Since(changeAt).Round(time.Millisecond), what)
	readyAt := time.Now()
	sel := fmt.Sprintf(`bpf_agent_scans_total{k8s_node_name=%q}`, nodeName)
	var gap, jitter time.Duration
	var gaps []string // each gap, after the change's offset of its first point
	nSeries := 0
	kube.Eventually(t, 2*time.Minute, "two exports of the new agent", func() error {
		series, err := prom.RawSamples(ctx, sel, time.Since(changeAt)+3*interval)
		if err != nil {
			return err
		}
		nSeries = len(series)
		if len(series) > maxSeries {
			t.Fatalf("%s made %d series of one node's metric, want at most %d: the agent's identity changed with its pod: %v", what, len(series), maxSeries, slices.Collect(maps.Keys(series)))
		}
		var ts []time.Time
		fromNew := 0
		for _, pts := range series {
			for _, p := range pts {
				ts = append(ts, p.Time)
				if p.Time.After(readyAt) {
					fromNew++
				}
			}
		}
		if fromNew < 2 {
			return fmt.Errorf("%d samples from the new pod %s in %v", fromNew, nu.Name, series)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		gap, gaps, jitter = 0, gaps[:0], exportJitter
		for i := 1; i < len(ts); i++ {
			d := ts[i].Sub(ts[i-1])
			if ts[i].Before(changeAt) {
				// The old pod's steady exports: how late a point may
				// come on this machine now, whatever its load.
				jitter = max(jitter, d-interval, interval-d)
			}
			gap = max(gap, d)
			gaps = append(gaps, fmt.Sprintf("%s at %s", ts[i].Sub(ts[i-1]).Round(time.Millisecond), ts[i-1].Sub(changeAt).Round(time.Millisecond)))
		}
		return nil
	})
	t.Logf("%s: %d series of the node's bpf_agent_scans_total; longest gap between exports %s (interval %s); every gap, at its first point's time from the change: %s",
		what, nSeries, gap.Round(time.Millisecond), interval, strings.Join(gaps, ", "))
	if gap > interval+jitter {
		t.Errorf("%s left a %s gap between consecutive points of the node's export, more than one interval (%s, give or take %s, the old pod's steady exports' spread here)", what, gap, interval, jitter)
	}
}

// testFrozenAgent: an agent frozen with SIGSTOP (its API accepts nothing,
// its scans stop) fails its liveness checks and the kubelet restarts its
// container within failureThreshold × (periodSeconds + timeoutSeconds) +
// the probe's terminationGracePeriodSeconds, the bound the chart README
// states; the restarted agent is ready again. The pod stays: only its
// container restarts.
func testFrozenAgent(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	pod := waitAgentPod(t, cs, "")
	c := pod.Spec.Containers[0]
	l := c.LivenessProbe
	if l == nil || l.TerminationGracePeriodSeconds == nil {
		t.Fatalf("container %s: no liveness probe with its own grace period: %+v", c.Name, l)
	}
	bound := time.Duration(l.FailureThreshold*(l.PeriodSeconds+l.TimeoutSeconds))*time.Second +
		time.Duration(*l.TerminationGracePeriodSeconds)*time.Second
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid := podPID(t, pod, "bpfleet-agent")
	frozenAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freezing the agent (pid %d): %v", pid, err)
	}
	// The kill is fast; give the kubelet its sync and the container its
	// start on top of the bound before calling it lost.
	var st corev1.ContainerStatus
	kube.Eventually(t, bound+time.Minute, "the frozen agent's container restarted", func() error {
		p, err := cs.CoreV1().Pods(releaseNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != pod.UID {
			t.Fatalf("the agent pod was replaced (%s), not its container restarted", p.UID)
		}
		st = p.Status.ContainerStatuses[0]
		if st.RestartCount == restarts || st.LastTerminationState.Terminated == nil {
			return fmt.Errorf("%s: restarts %d", podState(p), st.RestartCount)
		}
		return nil
	})
	killedAfter := st.LastTerminationState.Terminated.FinishedAt.Sub(frozenAt)
	nu := waitAgentPod(t, cs, "")
	t.Logf("frozen agent killed %s after SIGSTOP (bound %s: %d × (%ds + %ds) + %ds), exit %d %s; ready again %s after SIGSTOP",
		killedAfter.Round(time.Millisecond), bound, l.FailureThreshold, l.PeriodSeconds, l.TimeoutSeconds, *l.TerminationGracePeriodSeconds,
		st.LastTerminationState.Terminated.ExitCode, st.LastTerminationState.Terminated.Reason, time.Since(frozenAt).Round(time.Millisecond))
	// FinishedAt has one-second resolution.
	if killedAfter > bound+time.Second {
		t.Errorf("the frozen agent was killed %s after SIGSTOP, more than the %s the probes allow", killedAfter, bound)
	}
	if nu.UID != pod.UID {
		t.Errorf("a new agent pod %s, want the frozen one's container restarted", nu.Name)
	}
}

// podOnlyLosses is what the agent's start line says it lost (its
// degraded=[...] list), less what the host kernel refuses the test process
// itself, root with every capability: a kernel's refusal is not a
// privilege the pod lacks. On the CI host (a Firecracker VM) the miss
// watcher's hardware watchpoints are refused with EPERM, and so is a stat
// of pid 1's network namespace (pid 1 holds a capability outside every
// other process's bounding set), which the pod's agent says it lost.
func podOnlyLosses(t *testing.T, started string) string {
	t.Helper()
	_, deg, _ := strings.Cut(started, " degraded=")
	deg = strings.TrimPrefix(deg, `"`)
	deg, _, _ = strings.Cut(deg, "]")
	deg = strings.TrimPrefix(deg, "[")
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/1/ns/net", &st); err == syscall.EACCES || err == syscall.EPERM {
		t.Logf("the host kernel refuses pid 1's network namespace to the test process too: %v", err)
		const line, end = "interface attachments: reading the host's network namespace ", "a security profile (AppArmor, SELinux) that allows setns"
		if i := strings.Index(deg, line); i >= 0 {
			if j := strings.Index(deg[i:], end); j >= 0 {
				deg = deg[:i] + deg[i+j+len(end):]
			}
		}
	}
	cpus, err := progstats.PossibleCPUs()
	if err != nil {
		t.Fatal(err)
	}
	w, err := misswatch.New(misswatch.Options{CPUs: cpus})
	if err == nil {
		w.Close()
		return strings.TrimSpace(deg)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Logf("the host kernel refuses the miss watcher to the test process too: %v", err)
		deg = strings.Replace(deg, "miss watch: "+err.Error()+": every miss is unexplained", "", 1)
	}
	return strings.TrimSpace(deg)
}
