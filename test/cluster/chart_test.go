package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/kube"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const (
	releaseName = "bpfleet"
	releaseNS   = "bpfleet-system"
	// podSecurityLevel is the Pod Security level the chart documents for
	// its namespace (charts/bpfleet/README.md).
	podSecurityLevel = "privileged"
)

// warnings collects the API server's warning headers (unknown fields,
// deprecated APIs, Pod Security warnings).
type warnings struct {
	mu  sync.Mutex
	all []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, text)
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.all)
}

// installed is the chart's release in the cluster.
type installed struct {
	rel      *release.Release
	warnings []string
	objects  []*unstructured.Unstructured // the manifest's documents
	helm     *action.Configuration        // for later actions on the release
	warn     *warnings                    // every warning of those, too
}

func (in *installed) object(kind string) *unstructured.Unstructured {
	for _, o := range in.objects {
		if o.GetKind() == kind {
			return o
		}
	}
	return nil
}

var chartInstall = sync.OnceValues(func() (*installed, error) { return installChart() })

// theRelease installs the chart once for every test that needs it.
func theRelease(t *testing.T) *installed {
	t.Helper()
	in, err := chartInstall()
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	return in
}

func chartDir() string { return kube.ChartDir() }

func podSecurityLabels(level string) map[string]string {
	return map[string]string{
		"pod-security.kubernetes.io/enforce": level,
		"pod-security.kubernetes.io/warn":    level,
		"pod-security.kubernetes.io/audit":   level,
	}
}

// installChart runs `helm install bpfleet charts/bpfleet -n bpfleet-system`
// with the default values through the Helm library, as the cluster admin,
// into a namespace labelled for the chart's Pod Security level.
func installChart() (*installed, error) {
	ctx := context.Background()
	cs, err := kubernetesClient(srv.restConfig(""))
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS, Labels: podSecurityLabels(podSecurityLevel)}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", releaseNS, err)
	}

	w := &warnings{}
	// No Wait: without a kubelet the DaemonSet never has ready pods.
	rel, cfg, err := srv.HelmInstall(releaseNS, releaseName, map[string]any{}, func(c *rest.Config) *rest.Config {
		c.WarningHandler = w
		return c
	})
	if err != nil {
		return nil, err
	}
	in := &installed{rel: rel, warnings: w.list(), helm: cfg, warn: w}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("manifest document: %w\n%s", err, doc)
		}
		if len(obj) == 0 {
			continue
		}
		in.objects = append(in.objects, &unstructured.Unstructured{Object: obj})
	}
	return in, nil
}

// TestChartInstall installs the chart with the Helm library into the real
// API server: every object is validated and stored by the server, with no
// warning (unknown fields, deprecated APIs, Pod Security).
func TestChartInstall(t *testing.T) {
	logVersion(t)
	in := theRelease(t)
	if in.rel.Info.Status != release.StatusDeployed {
		t.Fatalf("release status %s, want deployed", in.rel.Info.Status)
	}
	for _, w := range in.warnings {
		t.Errorf("API server warning during helm install: %s", w)
	}
	var kinds []string
	for _, o := range in.objects {
		kinds = append(kinds, o.GetKind())
	}
	slices.Sort(kinds)
	want := []string{"ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"}
	if !slices.Equal(kinds, want) {
		t.Errorf("default install created %v, want %v", kinds, want)
	}

	// Each object is in the server as the manifest says (read back with
	// the server's own REST mapping).
	cfg := srv.restConfig("")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(srv.admin(t).Discovery())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	for _, o := range in.objects {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
		if err != nil {
			t.Errorf("%s %s: the server does not serve it: %v", gvk, o.GetName(), err)
			continue
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		got, err := r.Get(context.Background(), o.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s/%s not in the server: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
			continue
		}
		if got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s %s: labels %v, want managed-by Helm", gvk.Kind, o.GetName(), got.GetLabels())
		}
	}

	// The DaemonSet as the server defaulted and stored it still has the
	// privileges the chart asks for (nothing silently dropped).
	ds, err := srv.admin(t).AppsV1().DaemonSets(releaseNS).Get(context.Background(), releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostPID || len(spec.Containers) != 1 || spec.Containers[0].SecurityContext == nil ||
		spec.Containers[0].SecurityContext.Capabilities == nil || len(spec.Containers[0].SecurityContext.Capabilities.Add) == 0 {
		t.Errorf("stored DaemonSet lost its privileges: hostPID %v, containers %+v", spec.HostPID, spec.Containers)
	}
}

// agentPod is a Pod made from the DaemonSet's template, as the DaemonSet
// controller would create it for a node.
func agentPod(ds *appsv1.DaemonSet, ns, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ds.Name + "-", Namespace: ns, Labels: ds.Spec.Template.Labels, Annotations: ds.Spec.Template.Annotations},
		Spec: func() corev1.PodSpec {
			s := *ds.Spec.Template.Spec.DeepCopy()
			s.NodeName = node
			return s
		}(),
	}
}

// TestChartPodSecurity admits the agent's pod (the DaemonSet's template)
// in a namespace labelled for the level the chart documents, and shows that
// level is the lowest that admits it: the baseline level refuses it, naming
// what the agent needs (host PID namespace, host paths, capabilities).
// Admission runs on a server-side dry run: there is no kubelet to run it.
func TestChartPodSecurity(t *testing.T) {
	logVersion(t)
	theRelease(t)
	ctx := context.Background()
	cs := srv.admin(t)
	ds, err := cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	w := &warnings{}
	cfg := srv.restConfig("")
	cfg.WarningHandler = w
	wcs, err := kubernetesClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := wcs.CoreV1().Pods(releaseNS).Create(ctx, agentPod(ds, releaseNS, "node-a"), dry)
	if err != nil {
		t.Fatalf("agent pod refused in namespace %s (pod-security %s): %v", releaseNS, podSecurityLevel, err)
	}
	for _, x := range w.list() {
		t.Errorf("API server warning on the agent pod: %s", x)
	}
	if pod.Spec.ServiceAccountName != releaseName || pod.Spec.PriorityClassName != "system-node-critical" || pod.Spec.Priority == nil {
		t.Errorf("admitted pod: service account %q, priority class %q (%v); want the chart's", pod.Spec.ServiceAccountName, pod.Spec.PriorityClassName, pod.Spec.Priority)
	}

	const baselineNS = "bpfleet-baseline"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: baselineNS, Labels: podSecurityLabels("baseline")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.CoreV1().Namespaces().Delete(ctx, baselineNS, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().ServiceAccounts(baselineNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: releaseName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Pods(baselineNS).Create(ctx, agentPod(ds, baselineNS, "node-a"), dry)
	if err == nil {
		t.Fatalf("agent pod admitted at pod-security baseline: the chart's documented level (%s) is higher than it needs", podSecurityLevel)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("agent pod refused at baseline for another reason: %v", err)
	}
	t.Logf("baseline refuses the agent pod: %v", err)
	for _, need := range []string{"hostPID", "hostPath", "capabilities"} {
		if !strings.Contains(err.Error(), need) {
			t.Errorf("baseline refusal does not name %s: %v", need, err)
		}
	}
}

// TestChartUpgrade upgrades the release with values that change the
// DaemonSet and add the OTLP headers Secret: the server accepts the patch,
// without warnings, and stores what the new values say.
func TestChartUpgrade(t *testing.T) {
	logVersion(t)
	in := theRelease(t)
	warned := len(in.warn.list())
	ch, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(in.helm)
	up.Namespace = releaseNS
	up.Timeout = 2 * time.Minute
	rel, err := up.Run(releaseName, ch, map[string]any{
		"agent": map[string]any{"metricsLevel": "owner"},
		"otel":  map[string]any{"headers": map[string]any{"Authorization": "Bearer not-a-secret"}},
		// The dashboards ConfigMap (two dashboards' JSON) is accepted by a
		// real API server.
		"dashboards": map[string]any{"enabled": true},
	})
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if rel.Info.Status != release.StatusDeployed || rel.Version < 2 {
		t.Fatalf("release after upgrade: status %s, revision %d", rel.Info.Status, rel.Version)
	}
	for _, w := range in.warn.list()[warned:] {
		t.Errorf("API server warning during helm upgrade: %s", w)
	}
	ctx := context.Background()
	cs := srv.admin(t)
	ds, err := cs.AppsV1().DaemonSets(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--metrics-level=owner") {
		t.Errorf("upgraded DaemonSet args %v, want --metrics-level=owner", c.Args)
	}
	var secretName string
	for _, e := range c.Env {
		if e.Name == "OTEL_EXPORTER_OTLP_HEADERS" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secretName = e.ValueFrom.SecretKeyRef.Name
		}
	}
	if secretName == "" {
		t.Fatalf("upgraded DaemonSet takes no OTEL_EXPORTER_OTLP_HEADERS from a Secret: %+v", c.Env)
	}
	sec, err := cs.CoreV1().Secrets(releaseNS).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the headers Secret: %v", err)
	}
	if got := string(sec.Data["OTEL_EXPORTER_OTLP_HEADERS"]); got != "Authorization=Bearer not-a-secret" {
		t.Errorf("headers Secret holds %q", got)
	}
	cm, err := cs.CoreV1().ConfigMaps(releaseNS).Get(ctx, releaseName+"-dashboards", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the dashboards ConfigMap: %v", err)
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Data["bpfleet-fleet.json"] == "" || cm.Data["bpfleet-node.json"] == "" {
		t.Errorf("dashboards ConfigMap: labels %v, keys %d", cm.Labels, len(cm.Data))
	}
	if ds.Spec.Template.Annotations["checksum/otlp"] == "" {
		t.Errorf("upgraded pod template has no checksum/otlp annotation (pods would not roll on a header change): %v", ds.Spec.Template.Annotations)
	}
}
