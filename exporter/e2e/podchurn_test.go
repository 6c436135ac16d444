package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/kube"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/test/backends"
	"github.com/bpfleet/bpfleet/test/pods"
)

// The pods' API objects: the even pods belong to the Deployment shop/web
// (its ReplicaSet web-<hash>), the odd ones are unknown to the API (not yet
// listed, or no API access): their programs fall back to the class their
// cgroup or interface says.
const (
	churnNode      = "podchurn"
	churnNamespace = "shop"
	churnHash      = "6d4cf56db6"
)

func knownPod(p *pods.Pod) bool { return p.Index%2 == 0 }

func podObject(p *pods.Pod, node string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-" + churnHash + "-" + p.UID[:5], Namespace: churnNamespace, UID: types.UID(p.UID),
			Labels:          map[string]string{"pod-template-hash": churnHash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-" + churnHash, Controller: &yes}},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "web", ContainerID: "containerd://" + p.ContainerID}}},
	}
}

// fakePodClient passes on the fake clientset's statement that it cannot
// stream watch-list, as agent/kube's tests do.
type fakePodClient struct {
	corev1client.PodInterface
	cs *fake.Clientset
}

func (f fakePodClient) IsWatchListSemanticsUnSupported() bool {
	return f.cs.IsWatchListSemanticsUnSupported()
}

// podAPI is a pod cache (agent/kube) over a fake API server holding the
// known pods of set, kept in step with its restarts by publish.
type podAPI struct {
	client *fake.Clientset
	cache  *kube.Pods
	node   string
	listed []*corev1.Pod
}

func startPodAPI(t testing.TB, node string) *podAPI {
	t.Helper()
	client := fake.NewClientset()
	c, err := kube.New(fakePodClient{client.CoreV1().Pods(metav1.NamespaceAll), client}, node, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
	if err := c.WaitSynced(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return &podAPI{client: client, cache: c, node: node}
}

// publish replaces the API's pods with the known pods of set and waits
// until the cache names each. The fake API's watch holds 100 events and
// panics on the next: the changes are made 50 at a time, each batch
// waited for (every add and delete moves the cache's generation).
func (a *podAPI) publish(t testing.TB, set *pods.Set) {
	t.Helper()
	ctx := context.Background()
	pending, gen := 0, a.cache.Generation()
	settle := func(force bool) {
		if pending < 50 && !force {
			return
		}
		want := gen + uint64(pending)
		if err := backends.Eventually(30*time.Second, func() error {
			if g := a.cache.Generation(); g < want {
				return fmt.Errorf("pod cache at generation %d, want %d", g, want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		pending, gen = 0, a.cache.Generation()
	}
	for _, p := range a.listed {
		if err := a.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pending++
		settle(false)
	}
	a.listed = nil
	for _, p := range set.Pods {
		if !knownPod(p) {
			continue
		}
		obj := podObject(p, a.node)
		if _, err := a.client.CoreV1().Pods(churnNamespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a.listed = append(a.listed, obj)
		pending++
		settle(false)
	}
	settle(true)
	err := backends.Eventually(30*time.Second, func() error {
		for _, p := range set.Pods {
			o := agent.Owner{PodUID: p.UID}
			a.cache.Fill(&o)
			if (o.PodNamespace != "") != knownPod(p) {
				return fmt.Errorf("pod %d (%s): cache says namespace %q", p.Index, p.UID, o.PodNamespace)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kindOf says which per-pod kind a series' program type and attach type
// are.
func kindOf(labels map[string]string) pods.Kind {
	switch labels["bpf_program_type"] + " " + labels["bpf_attach_type"] {
	case "cgroup_device cgroup_device":
		return pods.Device
	case "cgroup_skb cgroup_inet_ingress":
		return pods.CgroupSKB
	case "cgroup_sock cgroup_inet_sock_create":
		return pods.CgroupSock
	case "sched_cls tc_ingress":
		return pods.TC
	case "sched_cls tcx_ingress":
		return pods.TCX
	case "xdp xdp":
		return pods.XDP
	}
	return ""
}

// seriesByKind counts the program series of instance in Prometheus by
// per-pod kind: those with a sample in the last five minutes, or (ever)
// every series with a sample in the last hour.
func seriesByKind(t testing.TB, prom *backends.Prometheus, instance string, ever bool) map[pods.Kind]float64 {
	t.Helper()
	sel := fmt.Sprintf(`{instance=%q, __name__=~"bpf_program_.*|bpf_link_.*"}`, instance)
	if ever {
		sel = "last_over_time(" + sel + "[1h])"
	}
	ss, err := prom.Query(context.Background(), "count by (bpf_program_type, bpf_attach_type) ("+sel+")")
	if err != nil {
		t.Fatal(err)
	}
	out := map[pods.Kind]float64{}
	for _, s := range ss {
		if k := kindOf(s.Labels); k != "" {
			out[k] += s.Value
		}
	}
	return out
}

// wantTargets is what the workload level's bpf.attach.target says for the
// programs of kind k on the pods of set: the workload of each pod the API
// names, else the class of its cgroup (QoS) or interface (driver and name
// prefix).
func wantTargets(set *pods.Set, k pods.Kind) []string {
	seen := map[string]bool{}
	for _, p := range set.Pods {
		var t string
		switch k {
		case pods.Device, pods.CgroupSKB, pods.CgroupSock:
			t = "kubepods/" + p.QoS
			if knownPod(p) {
				t = churnNamespace + "/Deployment/web"
			}
		default:
			prefix := strings.TrimRight(p.HostIf, "0123456789abcdef")
			if strings.HasPrefix(p.HostIf, "lxc") {
				prefix = "lxc"
			}
			t = "veth:" + prefix + "*"
			if knownPod(p) {
				t = "veth:" + churnNamespace + "/Deployment/web"
			}
			if k == pods.XDP {
				t += " (generic)"
			}
		}
		seen[t] = true
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// podChurn restarts set's pods rounds times under one in-process agent
// (owners on, the pod cache of api as its filler) whose workload-level
// exporter pushes one export per round into prom: the agent's own scan,
// attribution and exporter, with the clock ours.
func podChurn(t testing.TB, prom *backends.Prometheus, set *pods.Set, api *podAPI, rounds int, instance string) (gen0, ever map[pods.Kind]float64) {
	t.Helper()
	ctx := context.Background()
	a, err := agent.New(agent.Config{Owners: true, OwnerIterator: true, QuietIntervals: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	a.SetOwnerFiller(api.cache)
	e, err := exporter.New(ctx, exporter.Config{
		Level: exporter.LevelWorkload, NodeName: instance,
		OTel:     metricsTo(t, "http://"+prom.Addr+"/api/v1/otlp"),
		Interval: time.Hour, // exported by ForceFlush, one export per round
		Kernel:   a.Kernel(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	for round := 0; round <= rounds; round++ {
		if round > 0 {
			set.Restart(t)
		}
		api.publish(t, set)
		snap := scanOurs(t, a, set.IDs(), round)
		e.Update(ctx, snap)
		if err := e.ForceFlush(ctx); err != nil {
			t.Fatalf("round %d: export: %v", round, err)
		}
		if round == 0 {
			gen0 = seriesByKind(t, prom, instance, false)
		}
	}
	return gen0, seriesByKind(t, prom, instance, true)
}

// TestPodChurnSeries: on a node whose pods are restarted, the default
// (workload) level exports no new series, for every kind of program real
// nodes attach per pod: runc's device programs on the containers' cgroups,
// cgroup_skb and cgroup_sock links on the pods' cgroups, tc, tcx and XDP
// on the host ends of their veth pairs. 12 pods (every combination of QoS
// class, CNI naming and known to the API or not), restarted 3 times (new
// UIDs, container ids, interfaces, programs), export into a real
// Prometheus; the series it ever saw stay within 5% of one generation's.
// The targets are checked both ways: a pod the API names gives its
// workload, an unknown one its cgroup's QoS class or its interface's
// driver and name prefix.
func TestPodChurnSeries(t *testing.T) {
	const npods, rounds = 12, 3
	prom := backends.StartPrometheus(t)
	set := pods.New(t, npods, pods.Kinds...)
	api := startPodAPI(t, churnNode)
	gen0, ever := podChurn(t, prom, set, api, rounds, churnNode)
	for _, k := range pods.Kinds {
		ratio := ever[k] / gen0[k]
		t.Logf("%-13s series: %3.0f in one generation of %d pods, %3.0f ever after %d restarts (%.2fx)", k, gen0[k], npods, ever[k], rounds, ratio)
		if gen0[k] == 0 {
			t.Errorf("%s: no series exported", k)
		} else if ratio > 1.05 {
			t.Errorf("%s: %.0f series ever after %d restarts for %.0f in one generation (%.2fx, want <= 1.05x)", k, ever[k], rounds, gen0[k], ratio)
		}
	}

	// The last generation's targets and owners, as Prometheus has them.
	ss, err := prom.Query(context.Background(), fmt.Sprintf(`group by (bpf_program_type, bpf_attach_type, bpf_attach_target, k8s_namespace_name, k8s_workload_kind, k8s_workload_name) (bpf_program_run_count_total{instance=%q})`, churnNode))
	if err != nil {
		t.Fatal(err)
	}
	got := map[pods.Kind][]string{}
	for _, s := range ss {
		k := kindOf(s.Labels)
		if k == "" {
			continue
		}
		got[k] = append(got[k], s.Labels["bpf_attach_target"])
		// Programs no process holds (device, tc, XDP) are owned through
		// their attachment: a pod the API names is their workload.
		if (k == pods.Device || k == pods.TC || k == pods.XDP) && strings.Contains(s.Labels["bpf_attach_target"], churnNamespace+"/") {
			if s.Labels["k8s_namespace_name"] != churnNamespace || s.Labels["k8s_workload_kind"] != "Deployment" || s.Labels["k8s_workload_name"] != "web" {
				t.Errorf("%s on a pod of %s/web: owner labels %v, want the pod's workload", k, churnNamespace, s.Labels)
			}
		}
	}
	for _, k := range pods.Kinds {
		sort.Strings(got[k])
		if want := wantTargets(set, k); strings.Join(got[k], "|") != strings.Join(want, "|") {
			t.Errorf("%s: %d targets %q, want %q", k, len(got[k]), got[k][:min(len(got[k]), 4)], want)
		}
	}
}
