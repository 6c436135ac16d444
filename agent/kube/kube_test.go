package kube

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bpfleet/bpfleet/agent"
)

const (
	idA   = "3f4b1a6c9d2e8f7a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a"
	idB   = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
	idI   = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	idD   = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
	uidA  = "5d1e9a7c-3b2f-4e8d-9c6a-1f0e2d3c4b5a"
	uidB  = "6e2f0b8d-4c3a-4f9e-8d7b-2a1f3e4d5c6b"
	uidD  = "7f3a1c9e-5d4b-4a0f-9e8c-3b2a4f5e6d7c"
	node1 = "node-1"
)

func pod(name, ns, uid, node string, containers map[string]string, init map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	for n, id := range containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: n, ContainerID: id})
	}
	for n, id := range init {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: n, ContainerID: id})
	}
	return p
}

func systemdCgroup(uid, scope string) string {
	return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice/" + scope
}

// fakePods is the fake clientset's pods API, passing on the fake's
// statement that it cannot stream watch-list (so the reflector lists and
// watches instead of waiting for a bookmark that never comes).
type fakePods struct {
	corev1client.PodInterface
	cs *fake.Clientset
}

func (f fakePods) IsWatchListSemanticsUnSupported() bool {
	return f.cs.IsWatchListSemanticsUnSupported()
}

func start(t *testing.T, client *fake.Clientset) *Pods {
	t.Helper()
	p, err := New(fakePods{client.CoreV1().Pods(metav1.NamespaceAll), client}, node1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go p.Run(ctx)
	return p
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPodAttribution(t *testing.T) {
	cilium := pod("cilium-x1", "kube-system", uidA, node1, map[string]string{"cilium-agent": "containerd://" + idA}, map[string]string{"mount-bpf-fs": "containerd://" + idI})
	yes := true
	cilium.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "cilium", Controller: &yes}}
	client := fake.NewClientset(
		cilium,
		// Another node's pod: the fake ignores field selectors, so only the
		// resolver's own node check keeps it out.
		pod("tetragon-z", "security", uidB, "node-2", map[string]string{"tetragon": "cri-o://" + idB}, nil),
	)
	var mu sync.Mutex
	var selectors []string
	record := func(a k8stesting.Action) {
		mu.Lock()
		defer mu.Unlock()
		switch a := a.(type) {
		case k8stesting.ListAction:
			selectors = append(selectors, "list "+a.GetListRestrictions().Fields.String())
		case k8stesting.WatchAction:
			selectors = append(selectors, "watch "+a.GetWatchRestrictions().Fields.String())
		}
	}
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) { record(a); return false, nil, nil })
	client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) { record(a); return false, nil, nil })

	p := start(t, client)
	if err := p.WaitSynced(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watch to start", func() bool { mu.Lock(); defer mu.Unlock(); return len(selectors) >= 2 })
	mu.Lock()
	for _, s := range selectors {
		if !strings.HasSuffix(s, " spec.nodeName="+node1) {
			t.Errorf("API call %q is not restricted to spec.nodeName=%s", s, node1)
		}
	}
	mu.Unlock()

	for _, c := range []struct {
		name string
		in   agent.Owner
		want agent.Owner
	}{
		{"containerd container by id",
			agent.Owner{PID: 10, Comm: "cilium-agent", Cgroup: systemdCgroup(uidA, "cri-containerd-"+idA+".scope")},
			agent.Owner{PID: 10, Comm: "cilium-agent", Cgroup: systemdCgroup(uidA, "cri-containerd-"+idA+".scope"), ContainerID: idA, Runtime: "containerd", PodUID: uidA, PodName: "cilium-x1", PodNamespace: "kube-system", ContainerName: "cilium-agent", WorkloadKind: "DaemonSet", WorkloadName: "cilium"}},
		{"init container",
			agent.Owner{Cgroup: "/kubepods/burstable/pod" + uidA + "/" + idI},
			agent.Owner{Cgroup: "/kubepods/burstable/pod" + uidA + "/" + idI, ContainerID: idI, PodUID: uidA, PodName: "cilium-x1", PodNamespace: "kube-system", ContainerName: "mount-bpf-fs", WorkloadKind: "DaemonSet", WorkloadName: "cilium"}},
		{"pod UID only (conmon scope)",
			agent.Owner{Cgroup: systemdCgroup(uidA, "crio-conmon-"+idA+".scope")},
			agent.Owner{Cgroup: systemdCgroup(uidA, "crio-conmon-"+idA+".scope"), PodUID: uidA, PodName: "cilium-x1", PodNamespace: "kube-system", WorkloadKind: "DaemonSet", WorkloadName: "cilium"}},
		{"container id given by the owner walk",
			agent.Owner{ContainerID: idA, Runtime: "containerd"},
			agent.Owner{ContainerID: idA, Runtime: "containerd", PodUID: uidA, PodName: "cilium-x1", PodNamespace: "kube-system", ContainerName: "cilium-agent", WorkloadKind: "DaemonSet", WorkloadName: "cilium"}},
		{"other node's pod is not named",
			agent.Owner{Cgroup: systemdCgroup(uidB, "crio-"+idB+".scope")},
			agent.Owner{Cgroup: systemdCgroup(uidB, "crio-"+idB+".scope"), ContainerID: idB, Runtime: "cri-o", PodUID: uidB}},
		{"host process",
			agent.Owner{PID: 1, Comm: "systemd", Cgroup: "/init.scope"},
			agent.Owner{PID: 1, Comm: "systemd", Cgroup: "/init.scope"}},
		{"docker outside kubernetes",
			agent.Owner{Cgroup: "/system.slice/docker-" + idD + ".scope"},
			agent.Owner{Cgroup: "/system.slice/docker-" + idD + ".scope", ContainerID: idD, Runtime: "docker"}},
	} {
		got := c.in
		p.Fill(&got)
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}

	// The watch keeps the cache current: a new pod is named, a deleted one is forgotten.
	ctx := context.Background()
	if _, err := client.CoreV1().Pods("monitoring").Create(ctx, pod("bpftop-1", "monitoring", uidD, node1, map[string]string{"bpftop": "containerd://" + idD}, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new pod to be named", func() bool {
		o := agent.Owner{ContainerID: idD}
		p.Fill(&o)
		return o.PodName == "bpftop-1" && o.ContainerName == "bpftop" && o.PodNamespace == "monitoring"
	})
	if err := client.CoreV1().Pods("kube-system").Delete(ctx, "cilium-x1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted pod to be forgotten", func() bool {
		o := agent.Owner{ContainerID: idA}
		p.Fill(&o)
		return o.PodName == ""
	})
}

// TestNoAPIAccess: RBAC refuses the list; attribution degrades to what the
// cgroup path says and the error says why.
func TestNoAPIAccess(t *testing.T) {
	client := fake.NewClientset(pod("cilium-x1", "kube-system", uidA, node1, map[string]string{"cilium-agent": "containerd://" + idA}, nil))
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "system:serviceaccount:x:y" cannot list resource "pods"`))
	})
	p := start(t, client)
	// A refusal ends the wait at once: waiting would not change it.
	begin := time.Now()
	err := p.WaitSynced(context.Background(), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "cannot list") || !Refused(err) {
		t.Errorf("WaitSynced = %v, want the forbidden error", err)
	}
	if d := time.Since(begin); d > 30*time.Second {
		t.Errorf("WaitSynced waited %s on a refused list", d)
	}
	if p.Synced() {
		t.Error("Synced() true after a forbidden list")
	}
	o := agent.Owner{Cgroup: systemdCgroup(uidA, "cri-containerd-"+idA+".scope")}
	p.Fill(&o)
	if o.ContainerID != idA || o.PodUID != uidA || o.Runtime != "containerd" || o.PodName != "" {
		t.Errorf("without API access: %+v, want container id and pod UID only", o)
	}

	var none *Pods
	o = agent.Owner{Cgroup: systemdCgroup(uidA, "cri-containerd-"+idA+".scope")}
	none.Fill(&o)
	if o.ContainerID != idA || o.PodUID != uidA {
		t.Errorf("nil Pods: %+v", o)
	}
	if _, err := New(client.CoreV1().Pods(""), "", 0); err == nil || !strings.Contains(err.Error(), NodeNameEnv) {
		t.Errorf("New without a node name: %v", err)
	}
}

// TestKubeconfig: an agent outside a pod takes its API server and
// credentials from $KUBECONFIG; a bad one is named in the error.
func TestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	missing := dir + "/missing"
	t.Setenv(KubeconfigEnv, missing)
	if _, err := NewInCluster(node1); err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), KubeconfigEnv) {
		t.Errorf("NewInCluster with a missing kubeconfig: %v, want an error naming it", err)
	}
	good := dir + "/kubeconfig"
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(good, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(KubeconfigEnv, good)
	if _, err := NewInCluster(node1); err != nil {
		t.Errorf("NewInCluster with a kubeconfig: %v", err)
	}
}

func TestWorkloadOf(t *testing.T) {
	ctrl := func(kind, name string) []metav1.OwnerReference {
		yes := true
		return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: &yes}}
	}
	notCtrl := []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-6d4cf56db6"}}
	for _, tc := range []struct {
		name       string
		refs       []metav1.OwnerReference
		labels     map[string]string
		kind, want string
	}{
		{"deployment", ctrl("ReplicaSet", "web-6d4cf56db6"), map[string]string{podTemplateHash: "6d4cf56db6"}, "Deployment", "web"},
		{"bare replicaset (no hash label)", ctrl("ReplicaSet", "web-6d4cf56db6"), nil, "ReplicaSet", "web-6d4cf56db6"},
		{"hash does not match", ctrl("ReplicaSet", "web-abc"), map[string]string{podTemplateHash: "6d4cf56db6"}, "ReplicaSet", "web-abc"},
		{"daemonset", ctrl("DaemonSet", "cilium"), nil, "DaemonSet", "cilium"},
		{"statefulset", ctrl("StatefulSet", "db"), nil, "StatefulSet", "db"},
		{"cronjob", ctrl("Job", "backup-29412345"), nil, "CronJob", "backup"},
		{"job", ctrl("Job", "migrate-v2"), nil, "Job", "migrate-v2"},
		{"job with a short number", ctrl("Job", "migrate-42"), nil, "Job", "migrate-42"},
		{"owner that is not the controller", notCtrl, nil, "", ""},
		{"bare pod", nil, nil, "", ""},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", OwnerReferences: tc.refs, Labels: tc.labels}}
		// Through slim, as the informer stores it.
		obj, err := slim(p)
		if err != nil {
			t.Fatal(err)
		}
		kind, name := workloadOf(obj.(*corev1.Pod))
		if kind != tc.kind || name != tc.want {
			t.Errorf("%s: workloadOf = %q %q, want %q %q", tc.name, kind, name, tc.kind, tc.want)
		}
	}
}

// TestGeneration: the generation moves when the cache changes in a way Fill
// sees (a pod added, its containers changed, a pod deleted) and not for an
// update Fill cannot see (status only), so the agent fills owners again
// exactly then.
func TestGeneration(t *testing.T) {
	if g := (*Pods)(nil).Generation(); g != 0 {
		t.Errorf("a nil *Pods: generation %d, want 0", g)
	}
	cilium := pod("cilium-x1", "kube-system", uidA, node1, map[string]string{"cilium-agent": "containerd://" + idA}, nil)
	client := fake.NewClientset(cilium)
	p := start(t, client)
	if err := p.WaitSynced(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first list to move the generation", func() bool { return p.Generation() > 0 })
	ctx := context.Background()
	pods := client.CoreV1().Pods("kube-system")
	// A status-only update, then one Fill sees: once the second moved the
	// generation, the first (delivered before it, in order) did not.
	g0 := p.Generation()
	upd := cilium.DeepCopy()
	upd.Status.Phase = corev1.PodRunning
	upd.ResourceVersion = "2"
	if _, err := pods.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	upd = upd.DeepCopy()
	upd.Status.ContainerStatuses[0].ContainerID = "containerd://" + idB
	upd.ResourceVersion = "3"
	if _, err := pods.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new container id to move the generation", func() bool {
		o := agent.Owner{ContainerID: idB}
		p.Fill(&o)
		return o.PodName == "cilium-x1" && p.Generation() > g0
	})
	if g := p.Generation(); g != g0+1 {
		t.Errorf("a status update and a container change moved the generation by %d, want 1", g-g0)
	}
	g1 := p.Generation()
	if err := pods.Delete(ctx, "cilium-x1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a deleted pod to move the generation", func() bool { return p.Generation() > g1 })
}
