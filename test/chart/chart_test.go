// Package chart tests the Helm chart in charts/bpfleet: rendered with the
// real Helm library, every document decoded strictly into Kubernetes API
// types, the DaemonSet's privileges and mounts asserted, bad values refused.
package chart

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/bpfleet/bpfleet/test/kernels/privilege"
)

func chartDir(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "charts", "bpfleet")
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("loading chart: %v", err)
	}
	return c
}

// rendered is one release's documents, decoded.
type rendered struct {
	DaemonSet          *appsv1.DaemonSet
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	Service            *corev1.Service
	Secret             *corev1.Secret
	ServiceMonitor     *serviceMonitor
	PrometheusRule     *prometheusRule
	ConfigMap          *corev1.ConfigMap
	Notes              string
	kinds              []string
}

// render installs the chart client-side (dry run, no cluster), which runs
// schema validation and every template exactly as `helm install` does.
func render(t testing.TB, values string) (*rendered, error) {
	t.Helper()
	return renderFor(t, values, "1.33")
}

// renderFor renders for the Kubernetes version major.minor.
func renderFor(t testing.TB, values, kube string) (*rendered, error) {
	t.Helper()
	major, minor, _ := strings.Cut(kube, ".")
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatalf("test values: %v", err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.ReleaseName = "bpfleet"
	inst.Namespace = "bpfleet-system"
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v" + kube + ".0", Major: major, Minor: minor}
	rel, err := inst.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	r := &rendered{Notes: rel.Info.Notes}
	for _, doc := range splitDocs(rel.Manifest) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		var into any
		switch meta.Kind {
		case "DaemonSet":
			r.DaemonSet = &appsv1.DaemonSet{}
			into = r.DaemonSet
		case "ServiceAccount":
			r.ServiceAccount = &corev1.ServiceAccount{}
			into = r.ServiceAccount
		case "ClusterRole":
			r.ClusterRole = &rbacv1.ClusterRole{}
			into = r.ClusterRole
		case "ClusterRoleBinding":
			r.ClusterRoleBinding = &rbacv1.ClusterRoleBinding{}
			into = r.ClusterRoleBinding
		case "Service":
			r.Service = &corev1.Service{}
			into = r.Service
		case "Secret":
			r.Secret = &corev1.Secret{}
			into = r.Secret
		case "ServiceMonitor":
			r.ServiceMonitor = &serviceMonitor{}
			into = r.ServiceMonitor
		case "PrometheusRule":
			r.PrometheusRule = &prometheusRule{}
			into = r.PrometheusRule
		case "ConfigMap":
			r.ConfigMap = &corev1.ConfigMap{}
			into = r.ConfigMap
		default:
			t.Fatalf("chart renders an unexpected kind %q:\n%s", meta.Kind, doc)
		}
		if slices.Contains(r.kinds, meta.Kind) {
			t.Fatalf("chart renders two %s documents", meta.Kind)
		}
		r.kinds = append(r.kinds, meta.Kind)
		// Strict: a misspelt or misplaced field fails here instead of
		// being silently dropped by the API server.
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s does not decode strictly into its API type: %v\n%s", meta.Kind, err, doc)
		}
	}
	return r, nil
}

func splitDocs(manifest string) []string {
	var out []string
	for _, d := range strings.Split(manifest, "\n---") {
		// Drop the "# Source:" comment lines Helm adds; keep the rest.
		var b bytes.Buffer
		for _, line := range strings.Split(d, "\n") {
			if strings.HasPrefix(line, "# Source:") {
				continue
			}
			b.WriteString(line + "\n")
		}
		if strings.TrimSpace(stripComments(b.String())) != "" {
			out = append(out, b.String())
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func mustRender(t *testing.T, values string) *rendered {
	t.Helper()
	r, err := render(t, values)
	if err != nil {
		t.Fatalf("rendering with values %q: %v", values, err)
	}
	if r.DaemonSet == nil {
		t.Fatal("no DaemonSet rendered")
	}
	return r
}

func agentContainer(t *testing.T, r *rendered) corev1.Container {
	t.Helper()
	cs := r.DaemonSet.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "agent" {
		t.Fatalf("want one container named agent, got %d", len(cs))
	}
	return cs[0]
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func hasArg(c corev1.Container, arg string) bool { return slices.Contains(c.Args, arg) }

func TestDefaultsLeastPrivilege(t *testing.T) {
	r := mustRender(t, "")
	ps := r.DaemonSet.Spec.Template.Spec
	c := agentContainer(t, r)

	if !ps.HostPID {
		t.Error("hostPID is off: owners in other containers are invisible")
	}
	if ps.HostNetwork {
		t.Error("hostNetwork is on by default")
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Error("privileged is not explicitly false")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("root filesystem is writable")
	}
	if fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" {
		t.Errorf("capabilities.drop = %v, want [ALL]", sc.Capabilities.Drop)
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	// The kernel matrix asks each kernel about exactly this set.
	if want := slices.Sorted(slices.Values(privilege.ChartCapabilities)); !slices.Equal(add, want) {
		t.Errorf("capabilities.add = %v, want exactly %v", add, want)
	}
	if ps.SecurityContext != nil && ps.SecurityContext.SeccompProfile != nil && ps.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
		t.Error("pod seccomp is Unconfined by default")
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container seccomp = %v, want RuntimeDefault", sc.SeccompProfile)
	}

	// Every host path is mounted read-only, where the agent's flags expect it.
	vols := map[string]*corev1.HostPathVolumeSource{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath
		}
	}
	// The kernel matrix mounts exactly these in its pod-like children.
	want := map[string][2]string{ // host path -> mount path
		"/proc": {"/proc", "/host/proc"},
	}
	for _, p := range privilege.ChartHostMounts {
		want[p] = [2]string{p, p}
	}
	seen := map[string]bool{}
	for _, m := range c.VolumeMounts {
		hp, ok := vols[m.Name]
		if !ok {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("host path %s is mounted writable at %s", hp.Path, m.MountPath)
		}
		w, ok := want[hp.Path]
		if !ok {
			t.Errorf("unexpected host path %s mounted at %s", hp.Path, m.MountPath)
			continue
		}
		if m.MountPath != w[1] {
			t.Errorf("host %s mounted at %s, want %s", hp.Path, m.MountPath, w[1])
		}
		seen[hp.Path] = true
	}
	for p := range want {
		if !seen[p] {
			t.Errorf("host path %s is not mounted", p)
		}
	}
	if len(vols) != len(want) {
		t.Errorf("%d host path volumes, want %d", len(vols), len(want))
	}
	for _, a := range []string{"agent", "--proc-root=/host/proc", "--bpffs=/sys/fs/bpf", "--interval=10s", "--metrics-level=workload", "--calibrate=true", "--api-addr=127.0.0.1:9808", "--max-programs=1000", "--program-info=false", "--span-budget=600"} {
		if !hasArg(c, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--api-token-file") }) {
		t.Error("--api-token-file without a token secret")
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--export-interval") }) {
		t.Error("--export-interval without agent.exportInterval: the agent's default (the scan interval) must apply")
	}

	// Node name from the downward API.
	if e, ok := env(c, "K8S_NODE_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("K8S_NODE_NAME is not from the downward API spec.nodeName: %+v", e)
	}
	if e, _ := env(c, "OTEL_RESOURCE_ATTRIBUTES"); !strings.Contains(e.Value, "k8s.node.name=$(K8S_NODE_NAME)") || strings.Contains(e.Value, "k8s.cluster.name") {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES = %q", e.Value)
	}

	// Runs everywhere, evicted last, rolls out gradually.
	if !slices.ContainsFunc(ps.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("tolerations %v do not tolerate every taint", ps.Tolerations)
	}
	if ps.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q", ps.PriorityClassName)
	}
	if us := r.DaemonSet.Spec.UpdateStrategy; us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil || us.RollingUpdate.MaxUnavailable == nil {
		t.Errorf("updateStrategy = %+v", us)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources = %+v, want CPU requests and a memory limit", c.Resources)
	}
	checkProbes(t, c, "127.0.0.1:9808")
	if len(c.Ports) != 0 {
		t.Errorf("ports %v: a loopback API on the pod network is no port of the pod's", c.Ports)
	}

	// RBAC: pods get/list/watch and nodes get (the node's pool), nothing
	// else, bound to the pod's account.
	if r.ClusterRole == nil || r.ClusterRoleBinding == nil || r.ServiceAccount == nil {
		t.Fatalf("RBAC missing: rendered %v", r.kinds)
	}
	if len(r.ClusterRole.Rules) != 2 {
		t.Fatalf("ClusterRole has %d rules, want 2", len(r.ClusterRole.Rules))
	}
	for i, want := range []struct{ resources, verbs string }{{"[pods]", "[get list watch]"}, {"[nodes]", "[get]"}} {
		rule := r.ClusterRole.Rules[i]
		verbs := slices.Clone(rule.Verbs)
		slices.Sort(verbs)
		if !slices.Equal(rule.APIGroups, []string{""}) || fmt.Sprint(rule.Resources) != want.resources || fmt.Sprint(verbs) != want.verbs || len(rule.ResourceNames) != 0 {
			t.Errorf("ClusterRole rule %d = %+v, want %s on core %s", i, rule, want.verbs, want.resources)
		}
	}
	if !hasArg(c, "--node-pool-labels=cloud.google.com/gke-nodepool,eks.amazonaws.com/nodegroup,kubernetes.azure.com/agentpool,karpenter.sh/nodepool") {
		t.Errorf("args %v: want the default --node-pool-labels", c.Args)
	}
	b := r.ClusterRoleBinding
	if b.RoleRef.Name != r.ClusterRole.Name || b.RoleRef.Kind != "ClusterRole" || len(b.Subjects) != 1 ||
		b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != r.ServiceAccount.Name || b.Subjects[0].Namespace != "bpfleet-system" {
		t.Errorf("binding %+v does not bind %s to ServiceAccount %s", b, r.ClusterRole.Name, r.ServiceAccount.Name)
	}
	if ps.ServiceAccountName != r.ServiceAccount.Name {
		t.Errorf("pod runs as %q, ServiceAccount is %q", ps.ServiceAccountName, r.ServiceAccount.Name)
	}
	if r.ServiceMonitor != nil || r.PrometheusRule != nil || r.Service != nil || r.Secret != nil || r.ConfigMap != nil {
		t.Errorf("optional objects rendered by default: %v", r.kinds)
	}
	if !strings.Contains(r.Notes, "otel.endpoint is empty, so the agents send nothing over OTLP") {
		t.Errorf("NOTES do not warn about the empty OTLP endpoint:\n%s", r.Notes)
	}
}

// TestCapabilitiesCommented: each added capability carries a comment saying
// why, in the template an operator reviews.
// checkProbes: both probes exec `bpfleet-agent health` (no shell, no
// network path from the kubelet needed) against the agent's API address,
// the readiness one with --ready, with bounded timings.
func checkProbes(t *testing.T, c corev1.Container, addr string) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		args  []string
	}{
		{"liveness", c.LivenessProbe, []string{"/bpfleet-agent", "health", "--api-addr=" + addr, "--timeout=4s"}},
		{"readiness", c.ReadinessProbe, []string{"/bpfleet-agent", "health", "--ready", "--api-addr=" + addr, "--timeout=4s"}},
	} {
		if p.probe == nil {
			t.Errorf("no %s probe: a hung agent is never restarted, a rollout never waits for a first scan", p.name)
			continue
		}
		if p.probe.Exec == nil || !slices.Equal(p.probe.Exec.Command, p.args) {
			t.Errorf("%s probe %+v, want exec %v", p.name, p.probe.ProbeHandler, p.args)
		}
		if p.probe.PeriodSeconds < 1 || p.probe.PeriodSeconds > 300 || p.probe.TimeoutSeconds < 1 || p.probe.TimeoutSeconds > 60 || p.probe.FailureThreshold < 1 || p.probe.FailureThreshold > 10 {
			t.Errorf("%s probe timings unbounded: %+v", p.name, p.probe)
		}
	}
	// A frozen agent is restarted within a minute: every check times out,
	// then the kubelet's SIGTERM waits out the grace period (a stopped
	// process does not take it) before the SIGKILL.
	if l := c.LivenessProbe; l != nil {
		if l.TerminationGracePeriodSeconds == nil {
			t.Errorf("liveness probe without terminationGracePeriodSeconds: a frozen agent is killed only after the pod's whole grace period")
		} else if worst := l.InitialDelaySeconds + l.FailureThreshold*(l.PeriodSeconds+l.TimeoutSeconds) + int32(*l.TerminationGracePeriodSeconds); worst > 60 {
			t.Errorf("liveness restarts a frozen agent only after %ds", worst)
		}
	}
}

// TestDefaultProbes: a default install renders both probes (issue 34: they
// used to render only for an API off loopback or on the host network).
func TestDefaultProbes(t *testing.T) {
	checkProbes(t, agentContainer(t, mustRender(t, "")), "127.0.0.1:9808")
}

func TestCapabilitiesCommented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "templates", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		cap, ok := strings.CutPrefix(strings.TrimSpace(l), "- ")
		if !ok || !slices.Contains(privilege.ChartCapabilities, cap) {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("capability %s at daemonset.yaml:%d has no comment saying why", cap, i+1)
		}
	}
}

// TestCapabilitiesDocumented: the chart README's table of the capabilities
// added back names exactly the DaemonSet's, each with why, and NOTES.txt
// names each one an operator must allow.
func TestCapabilitiesDocumented(t *testing.T) {
	r := mustRender(t, "")
	sc := agentContainer(t, r).SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	b, err := os.ReadFile(filepath.Join(chartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "exactly these added back:")
	if !ok {
		t.Fatal(`README.md has no "exactly these added back:" table`)
	}
	var documented []string
	for _, l := range strings.Split(strings.TrimLeft(table, "\n"), "\n") {
		if !strings.HasPrefix(l, "|") {
			break // the table's end
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) != 2 {
			t.Errorf("README.md capability row %q: want | capability | why |", l)
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if name == "capability" || strings.Trim(name, "- ") == "" {
			continue // header and rule
		}
		if strings.TrimSpace(cells[1]) == "" {
			t.Errorf("README.md: capability %s has no why", name)
		}
		documented = append(documented, name)
	}
	slices.Sort(documented)
	if !slices.Equal(documented, add) {
		t.Errorf("README.md's table of capabilities added back lists %v, the DaemonSet adds %v: document each with why", documented, add)
	}
	for _, c := range add {
		if !strings.Contains(r.Notes, "CAP_"+c) {
			t.Errorf("NOTES.txt does not name CAP_%s among what the pod needs", c)
		}
	}
}

func TestExposedAPIWithToken(t *testing.T) {
	r := mustRender(t, `
api: {address: 0.0.0.0, port: 9900, token: {existingSecret: bpfleet-api, key: tok}}
otel: {endpoint: "http://otel-collector.observability:4318", headers: {Authorization: "Bearer abc", X-Tenant: fleet}}
agent: {clusterName: prod-eu, metricsLevel: owner, interval: 30s, maxPrograms: 500, calibrate: false, exportInterval: 1m, programInfo: true, spanBudget: 0, missWatch: false, missBudget: 8}
`)
	c := agentContainer(t, r)
	for _, a := range []string{"--api-addr=0.0.0.0:9900", "--api-token-file=/etc/bpfleet/api/token", "--metrics-level=owner", "--interval=30s", "--max-programs=500", "--calibrate=false", "--export-interval=1m", "--program-info=true", "--span-budget=0", "--miss-watch=false", "--miss-budget=8"} {
		if !hasArg(c, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	var tokVol *corev1.SecretVolumeSource
	for _, v := range r.DaemonSet.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "bpfleet-api" {
			tokVol = v.Secret
		}
	}
	if tokVol == nil || len(tokVol.Items) != 1 || tokVol.Items[0].Key != "tok" || tokVol.Items[0].Path != "token" {
		t.Errorf("token secret volume = %+v", tokVol)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/bpfleet/api" && !m.ReadOnly {
			t.Error("token mounted writable")
		}
	}
	checkProbes(t, c, "0.0.0.0:9900")
	if len(c.Ports) != 1 || c.Ports[0].Name != "api" || c.Ports[0].ContainerPort != 9900 {
		t.Errorf("ports %v, want the exposed API's", c.Ports)
	}
	if e, _ := env(c, "OTEL_EXPORTER_OTLP_ENDPOINT"); e.Value != "http://otel-collector.observability:4318" {
		t.Errorf("endpoint env = %+v", e)
	}
	if e, _ := env(c, "OTEL_RESOURCE_ATTRIBUTES"); !strings.HasSuffix(e.Value, ",k8s.cluster.name=prod-eu") {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES = %q", e.Value)
	}
	// Headers go through a Secret, never into the pod spec in clear.
	e, _ := env(c, "OTEL_EXPORTER_OTLP_HEADERS")
	if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || r.Secret == nil || e.ValueFrom.SecretKeyRef.Name != r.Secret.Name {
		t.Fatalf("headers env %+v, secret %v", e, r.Secret)
	}
	if got := r.Secret.StringData["OTEL_EXPORTER_OTLP_HEADERS"]; got != "Authorization=Bearer abc,X-Tenant=fleet" {
		t.Errorf("headers secret = %q", got)
	}
	if r.DaemonSet.Spec.Template.Annotations["checksum/otlp"] == "" {
		t.Error("no checksum annotation: pods would not roll on a header change")
	}
	if strings.Contains(r.Notes, "otel.endpoint is empty") {
		t.Error("NOTES warn about an endpoint that is set")
	}
}

func TestExistingOTLPSecret(t *testing.T) {
	r := mustRender(t, `otel: {existingSecret: {name: otlp-creds, endpointKey: endpoint}}`)
	c := agentContainer(t, r)
	for name, key := range map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_ENDPOINT": "endpoint"} {
		e, _ := env(c, name)
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "otlp-creds" || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s = %+v, want from otlp-creds/%s", name, e, key)
		}
	}
	if r.Secret != nil {
		t.Error("chart created a headers Secret while an existing one was named")
	}
}

func TestHostNetworkProbesLoopback(t *testing.T) {
	r := mustRender(t, `hostNetwork: true`)
	ps := r.DaemonSet.Spec.Template.Spec
	c := agentContainer(t, r)
	if !ps.HostNetwork || ps.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v dnsPolicy %q", ps.HostNetwork, ps.DNSPolicy)
	}
	checkProbes(t, c, "127.0.0.1:9808")
}

func TestMonitoringObjects(t *testing.T) {
	r := mustRender(t, `
otel: {metricsExporter: prometheus, prometheus: {port: 9464}}
serviceMonitor: {enabled: true, labels: {release: kube-prometheus}}
prometheusRule: {enabled: true, labels: {release: kube-prometheus}}
serviceAccount: {create: false, name: existing-sa}
`)
	c := agentContainer(t, r)
	if e, _ := env(c, "OTEL_METRICS_EXPORTER"); e.Value != "prometheus" {
		t.Errorf("OTEL_METRICS_EXPORTER = %q", e.Value)
	}
	if e, _ := env(c, "OTEL_EXPORTER_PROMETHEUS_PORT"); e.Value != "9464" {
		t.Errorf("OTEL_EXPORTER_PROMETHEUS_PORT = %q", e.Value)
	}
	if r.Service == nil || r.Service.Spec.ClusterIP != "None" || len(r.Service.Spec.Ports) != 1 || r.Service.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Fatalf("metrics Service = %+v", r.Service)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9464 }) {
		t.Errorf("container ports %v lack metrics:9464", c.Ports)
	}
	sm := r.ServiceMonitor
	if sm == nil || sm.Metadata.Labels["release"] != "kube-prometheus" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Fatalf("ServiceMonitor = %+v", sm)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if r.Service.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, Service has %q", k, v, r.Service.Labels[k])
		}
	}
	for k, v := range r.Service.Spec.Selector {
		if r.DaemonSet.Spec.Template.Labels[k] != v {
			t.Errorf("Service selects %s=%s, pods have %q", k, v, r.DaemonSet.Spec.Template.Labels[k])
		}
	}
	if r.ServiceAccount != nil || r.DaemonSet.Spec.Template.Spec.ServiceAccountName != "existing-sa" || r.ClusterRoleBinding.Subjects[0].Name != "existing-sa" {
		t.Errorf("serviceAccount.create=false: SA %v, pod uses %q", r.ServiceAccount, r.DaemonSet.Spec.Template.Spec.ServiceAccountName)
	}
	checkRules(t, r.PrometheusRule)
}

// TestIteratorPins: agent.pinIterators mounts exactly one host path
// writable, the agent's own directory in bpffs, above the read-only bpffs;
// by default there is none.
func TestIteratorPins(t *testing.T) {
	writable := func(r *rendered) map[string]string { // mount path -> host path
		vols := map[string]*corev1.HostPathVolumeSource{}
		for _, v := range r.DaemonSet.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				vols[v.Name] = v.HostPath
			}
		}
		out := map[string]string{}
		for _, m := range agentContainer(t, r).VolumeMounts {
			if hp, ok := vols[m.Name]; ok && !m.ReadOnly {
				out[m.MountPath] = hp.Path
				if hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate {
					t.Errorf("writable host path %s has type %v, want DirectoryOrCreate", hp.Path, hp.Type)
				}
			}
		}
		return out
	}
	if w := writable(mustRender(t, "")); len(w) != 0 {
		t.Errorf("default renders writable host paths %v", w)
	}
	w := writable(mustRender(t, `{agent: {pinIterators: true}, hostPaths: {bpffs: /run/bpffs}}`))
	if len(w) != 1 || w["/sys/fs/bpf/bpfleet"] != "/run/bpffs/bpfleet" {
		t.Errorf("pinIterators renders writable host paths %v, want only /run/bpffs/bpfleet at /sys/fs/bpf/bpfleet", w)
	}
}

func TestOptionalOff(t *testing.T) {
	r := mustRender(t, `{rbac: {create: false}, serviceAccount: {create: false}, priorityClassName: "", tolerations: [], seccompProfile: {type: Unconfined}}`)
	checkProbes(t, agentContainer(t, r), "127.0.0.1:9808") // whatever is off, the probes are not
	if r.ClusterRole != nil || r.ClusterRoleBinding != nil || r.ServiceAccount != nil {
		t.Errorf("RBAC rendered with rbac.create=false: %v", r.kinds)
	}
	if r.DaemonSet.Spec.Template.Spec.PriorityClassName != "" || len(r.DaemonSet.Spec.Template.Spec.Tolerations) != 0 {
		t.Error("empty priorityClassName/tolerations not honoured")
	}
}

// TestAppArmorProfile: the agent runs unconfined by AppArmor unless the
// values say otherwise, because containerd's default profile refuses
// owners and interface targets (test/kernels/confine measures it): as the
// container's appArmorProfile from Kubernetes 1.30, as the annotation
// before.
func TestAppArmorProfile(t *testing.T) {
	const ann = "container.apparmor.security.beta.kubernetes.io/agent"
	for _, c := range []struct {
		kube, values  string
		field, annVal string // "": none
	}{
		{"1.33", "", "Unconfined", ""},
		{"1.30", "", "Unconfined", ""},
		{"1.29", "", "", "unconfined"},
		{"1.25", "", "", "unconfined"},
		{"1.33", `appArmorProfile: {type: RuntimeDefault}`, "RuntimeDefault", ""},
		{"1.29", `appArmorProfile: {type: RuntimeDefault}`, "", "runtime/default"},
		{"1.33", `appArmorProfile: {type: Localhost, localhostProfile: bpfleet}`, "Localhost", ""},
		{"1.29", `appArmorProfile: {type: Localhost, localhostProfile: bpfleet}`, "", "localhost/bpfleet"},
		{"1.33", `appArmorProfile: null`, "", ""},
		{"1.29", `appArmorProfile: null`, "", ""},
	} {
		r, err := renderFor(t, c.values, c.kube)
		if err != nil {
			t.Fatalf("Kubernetes %s, values %q: %v", c.kube, c.values, err)
		}
		field := ""
		if sc := agentContainer(t, r).SecurityContext; sc != nil && sc.AppArmorProfile != nil {
			field = string(sc.AppArmorProfile.Type)
		}
		got := r.DaemonSet.Spec.Template.Annotations[ann]
		if field != c.field || got != c.annVal {
			t.Errorf("Kubernetes %s, values %q: appArmorProfile %q, annotation %q; want %q, %q", c.kube, c.values, field, got, c.field, c.annVal)
		}
	}
}

// TestInvalidValuesRejected: the schema and the templates' fail refuse bad
// values, each with a message naming what is wrong.
func TestInvalidValuesRejected(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{`api: {address: 0.0.0.0}`, "api.address=0.0.0.0 is not loopback: set api.token.existingSecret"},
		{`api: {address: 10.0.0.1}`, "not loopback"},
		{`otel: {headers: {a: b}, existingSecret: {name: s}}`, "both set"},
		{`serviceMonitor: {enabled: true}`, "serviceMonitor.enabled needs otel.metricsExporter=prometheus"},
		{`{otel: {metricsExporter: prometheus, prometheus: {port: 9808}}}`, "pick two ports"},
		{`{serviceAccount: {create: false}}`, "set serviceAccount.name"},
		{`agent: {metricsLevel: everything}`, "metricsLevel"},
		{`agent: {interval: 10}`, "interval"},
		{`agent: {interval: 500ms}`, "interval"},
		{`agent: {interval: soon}`, "interval"},
		{`agent: {maxPrograms: -1}`, "maxPrograms"},
		{`agent: {exportInterval: 500ms}`, "exportInterval"},
		{`agent: {spanBudget: -1}`, "spanBudget"},
		{`agent: {missBudget: 0}`, "missBudget"},
		{`agent: {missWatch: "yes"}`, "missWatch"},
		{`agent: {programInfo: "yes"}`, "programInfo"},
		{`agent: {calibrate: "yes"}`, "calibrate"},
		{`agent: {stats: {mode: sometimes}}`, "mode"},
		{`agent: {stats: {window: 1}}`, "window"},
		{`agent: {stats: {period: soon}}`, "period"},
		{`agent: {clusterName: "a,b=c"}`, "clusterName"},
		{`agent: {extraArgs: [privileged]}`, "extraArgs"},
		{`api: {port: 70000}`, "port"},
		{`api: {address: "0.0.0.0:9808"}`, "not loopback"},
		{`otel: {metricsExporter: jaeger}`, "metricsExporter"},
		{`otel: {endpoint: "collector:4318"}`, "endpoint"},
		{`otel: {protocol: udp}`, "protocol"},
		{`otel: {protocol: http/json}`, "protocol"},
		{`otel: {tracesExporter: prometheus}`, "tracesExporter"},
		{`image: {digest: "sha256:xyz"}`, "digest"},
		{`image: {pullPolicy: Sometimes}`, "pullPolicy"},
		{`hostPaths: {proc: "proc"}`, "proc"},
		{`updateStrategy: {type: Recreate}`, "updateStrategy"},
		{`seccompProfile: {type: Off}`, "seccompProfile"},
		{`appArmorProfile: {type: Off}`, "appArmorProfile"},
		{`privileged: true`, "privileged"},
		{`securityContext: {privileged: true}`, "securityContext"},
		{`agent: {interal: 10s}`, "interal"},
		{`api: {enabled: false}`, "api.enabled=false leaves the liveness and readiness probes nothing to ask"},
		{`probes: {liveness: {periodSeconds: 0}}`, "periodSeconds"},
		{`probes: {readiness: {timeoutSeconds: 120}}`, "timeoutSeconds"},
		{`probes: {liveness: {failureThreshold: 100}}`, "failureThreshold"},
		{`probes: {liveness: {httpGet: {path: /}}}`, "httpGet"},
	} {
		_, err := render(t, c.values)
		if err == nil {
			t.Errorf("values %s were accepted", c.values)
			continue
		}
		t.Logf("%s -> %v", c.values, err)
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %s: error %q does not mention %q", c.values, err, c.want)
		}
	}
}

func TestLint(t *testing.T) {
	for _, values := range []string{"", `{prometheusRule: {enabled: true}, otel: {metricsExporter: prometheus}, serviceMonitor: {enabled: true}, dashboards: {enabled: true}}`} {
		vals := map[string]any{}
		yaml.Unmarshal([]byte(values), &vals)
		l := action.NewLint()
		l.Strict = true
		l.Namespace = "bpfleet-system"
		res := l.Run([]string{chartDir(t)}, vals)
		for _, err := range res.Errors {
			t.Errorf("helm lint (%s): %v", values, err)
		}
		for _, m := range res.Messages {
			if m.Severity >= support.InfoSev {
				t.Errorf("helm lint (%s): %s", values, m)
			}
		}
	}
}
