// Package kube names the pods and containers that own BPF programs. It
// watches, through the Kubernetes API, only the pods of the agent's own
// node (fieldSelector spec.nodeName), keeps them in an informer cache
// indexed by pod UID and container id, and fills agent.Owner's pod fields
// from it. Without API access it still fills the container id, runtime and
// pod UID that the owner's cgroup path names.
package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bpfleet/bpfleet/agent"
)

// NodeNameEnv is where the DaemonSet puts the node name (downward API).
const NodeNameEnv = "K8S_NODE_NAME"

const (
	byUID         = "uid"
	byContainerID = "containerID"
)

// Pods is a cache of the node's pods. The zero value is not usable; a nil
// *Pods is, and resolves from cgroup paths only.
type Pods struct {
	node     string
	informer cache.SharedIndexInformer
	lastErr  atomic.Pointer[error]
	// gen counts the cache's changes that Fill can see (Generation).
	gen atomic.Uint64
}

// KubeconfigEnv names a kubeconfig file to use instead of the pod's
// service account: for an agent run on a host outside any pod (a systemd
// unit on a node), or a test that talks to its own API server.
const KubeconfigEnv = "KUBECONFIG"

// NewInCluster watches the node's pods with the pod's service account, or
// with the kubeconfig $KUBECONFIG names when it is set. It fails when the
// process is not in a cluster (no service account or
// KUBERNETES_SERVICE_HOST) and no kubeconfig is given, which callers treat
// as "no pod names".
func NewInCluster(node string) (*Pods, error) {
	cfg, err := inClusterConfig()
	if err != nil {
		return nil, err
	}
	client, err := newRESTPods(cfg)
	if err != nil {
		return nil, err
	}
	return New(client, node, 0)
}

// inClusterConfig is the agent's API server and credentials: $KUBECONFIG
// where set, else the pod's ServiceAccount.
func inClusterConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path := os.Getenv(KubeconfigEnv); path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("kubernetes API: kubeconfig %s ($%s): %w", path, KubeconfigEnv, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("kubernetes API: %w", err)
	}
	cfg.UserAgent = "bpfleet-agent"
	// One list and one long watch (and one get of the node): a low rate
	// is plenty and spares the API server across thousands of nodes.
	cfg.QPS, cfg.Burst = 5, 10
	return cfg, nil
}

// New watches the pods of node through client, the pods of all namespaces
// (client-go's Pods(metav1.NamespaceAll), or NewInCluster's own). resync 0
// means never: watch events keep the cache current.
func New(client PodClient, node string, resync time.Duration) (*Pods, error) {
	if node == "" {
		return nil, fmt.Errorf("no node name: set %s from the downward API (spec.nodeName)", NodeNameEnv)
	}
	sel := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.Watch(ctx, o)
		},
	}
	p := &Pods{node: node}
	// The wrapper lets the reflector use streaming watch-list where the
	// client supports it and plain list+watch where it does not.
	p.informer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, resync, cache.Indexers{
		byUID:         func(obj any) ([]string, error) { return []string{string(obj.(*corev1.Pod).UID)}, nil },
		byContainerID: containerIDs,
	})
	// Keep only what attribution needs: a node runs up to hundreds of pods
	// whose full specs would dwarf the agent's own memory.
	if err := p.informer.SetTransform(slim); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	// The informer calls these after its cache took the change: a Fill
	// that began before a change counts a generation it may have missed.
	// Status updates (readiness, restarts) change nothing Fill reads and
	// are the bulk of a node's pod events.
	bump := func(any) { p.gen.Add(1) }
	if _, err := p.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    bump,
		DeleteFunc: bump,
		UpdateFunc: func(old, cur any) {
			if !sameForFill(old, cur) {
				p.gen.Add(1)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	if err := p.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		p.lastErr.Store(&err)
	}); err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	return p, nil
}

// Run watches until ctx is done. Start it in its own goroutine.
func (p *Pods) Run(ctx context.Context) { p.informer.RunWithContext(ctx) }

// WaitSynced waits up to timeout for the first list, less when the server
// refuses the agent (see Refused): waiting would not change that. An error
// is not fatal: attribution degrades to pod UIDs until the list arrives
// (the informer keeps retrying, so access granted later takes effect).
func (p *Pods) WaitSynced(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !p.informer.HasSynced() {
		if err := p.Err(); Refused(err) {
			return fmt.Errorf("listing pods of node %s: %w", p.node, err)
		}
		select {
		case <-ctx.Done():
			if err := p.Err(); err != nil {
				return fmt.Errorf("listing pods of node %s: %w", p.node, err)
			}
			return fmt.Errorf("listing pods of node %s: not synced after %s", p.node, timeout)
		case <-tick.C:
		}
	}
	return nil
}

// Refused reports whether err is the API server refusing the agent's
// credentials (401) or what its RBAC allows (403): an operator has to act.
func Refused(err error) bool {
	return err != nil && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err))
}

// Err is the latest list/watch error (e.g. RBAC forbids listing pods), nil
// when the watch is healthy or never failed.
func (p *Pods) Err() error {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Generation changes whenever the cache changes in a way Fill can see: a
// pod added or deleted, or its name, containers or controller changed. The
// agent fills an owner again only then (agent.OwnerFiller). A nil *Pods
// fills from cgroup paths alone, which never change: always 0.
func (p *Pods) Generation() uint64 {
	if p == nil {
		return 0
	}
	return p.gen.Load()
}

// sameForFill says two versions of a slimmed pod (slim) differ in nothing
// but their resource version.
func sameForFill(old, cur any) bool {
	a, ok1 := old.(*corev1.Pod)
	b, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 {
		return false
	}
	x, y := *a, *b
	x.ResourceVersion, y.ResourceVersion = "", ""
	return reflect.DeepEqual(x, y)
}

// Synced reports whether the first list has arrived.
func (p *Pods) Synced() bool { return p != nil && p.informer.HasSynced() }

func slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // tombstones pass through
	}
	s := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: pod.Spec.NodeName},
	}
	// The controller reference and the pod-template-hash label are what
	// workloadOf needs to name the pod's workload.
	if c := metav1.GetControllerOfNoCopy(pod); c != nil {
		s.OwnerReferences = []metav1.OwnerReference{{Kind: c.Kind, Name: c.Name, APIVersion: c.APIVersion, Controller: c.Controller}}
	}
	if h, ok := pod.Labels[podTemplateHash]; ok {
		s.Labels = map[string]string{podTemplateHash: h}
	}
	keep := func(cs []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(cs))
		for _, c := range cs {
			out = append(out, corev1.ContainerStatus{Name: c.Name, ContainerID: c.ContainerID})
		}
		return out
	}
	s.Status.ContainerStatuses = keep(pod.Status.ContainerStatuses)
	s.Status.InitContainerStatuses = keep(pod.Status.InitContainerStatuses)
	s.Status.EphemeralContainerStatuses = keep(pod.Status.EphemeralContainerStatuses)
	return s, nil
}

func allStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	n := len(pod.Status.ContainerStatuses) + len(pod.Status.InitContainerStatuses) + len(pod.Status.EphemeralContainerStatuses)
	out := make([]corev1.ContainerStatus, 0, n)
	out = append(out, pod.Status.ContainerStatuses...)
	out = append(out, pod.Status.InitContainerStatuses...)
	return append(out, pod.Status.EphemeralContainerStatuses...)
}

// bareID strips the runtime scheme of a status containerID
// ("containerd://<id>", "cri-o://<id>", "docker://<id>").
func bareID(s string) string {
	if _, id, ok := strings.Cut(s, "://"); ok {
		return id
	}
	return s
}

func containerIDs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, errors.New("not a pod")
	}
	var ids []string
	for _, c := range allStatuses(pod) {
		if id := bareID(c.ContainerID); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Fill completes o's container and pod fields: container id, runtime and
// pod UID from its cgroup path where the owner walk did not set them, then
// pod name, namespace and container name from the cache. A nil *Pods fills
// only what the cgroup path says.
func (p *Pods) Fill(o *agent.Owner) {
	o.FillFromCgroup()
	if p == nil || (o.ContainerID == "" && o.PodUID == "") {
		return
	}
	idx := p.informer.GetIndexer()
	if o.ContainerID != "" {
		if pod := p.one(idx, byContainerID, o.ContainerID); pod != nil {
			o.PodUID, o.PodName, o.PodNamespace = string(pod.UID), pod.Name, pod.Namespace
			o.WorkloadKind, o.WorkloadName = workloadOf(pod)
			for _, c := range allStatuses(pod) {
				if bareID(c.ContainerID) == o.ContainerID {
					o.ContainerName = c.Name
				}
			}
			return
		}
	}
	if o.PodUID != "" {
		if pod := p.one(idx, byUID, o.PodUID); pod != nil {
			o.PodName, o.PodNamespace = pod.Name, pod.Namespace
			o.WorkloadKind, o.WorkloadName = workloadOf(pod)
		}
	}
}

// podTemplateHash is the label a Deployment's ReplicaSets and their pods
// carry: the ReplicaSet is named <deployment>-<hash>.
const podTemplateHash = "pod-template-hash"

// workloadOf names the pod's workload from its controller reference, what
// survives the pod's replacement: a ReplicaSet that a Deployment made is
// named by the Deployment (its name less the pod-template-hash suffix), a
// Job that a CronJob made by the CronJob (its name less the scheduled-time
// suffix, minutes since the epoch). Both are read from names alone, so the
// agent needs no access to ReplicaSets or Jobs. A pod without a controller
// returns "", "".
func workloadOf(pod *corev1.Pod) (kind, name string) {
	c := metav1.GetControllerOfNoCopy(pod)
	if c == nil {
		return "", ""
	}
	switch c.Kind {
	case "ReplicaSet":
		if h := pod.Labels[podTemplateHash]; h != "" {
			if d, ok := strings.CutSuffix(c.Name, "-"+h); ok && d != "" {
				return "Deployment", d
			}
		}
	case "Job":
		if i := strings.LastIndexByte(c.Name, '-'); i > 0 && len(c.Name)-i-1 >= 8 && allDigits(c.Name[i+1:]) {
			return "CronJob", c.Name[:i]
		}
	}
	return c.Kind, c.Name
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// one returns the pod of this node under key, nil if none. The node check
// guards against an API server that ignored the field selector.
func (p *Pods) one(idx cache.Indexer, index, key string) *corev1.Pod {
	objs, err := idx.ByIndex(index, key)
	if err != nil {
		return nil
	}
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok && pod.Spec.NodeName == p.node {
			return pod
		}
	}
	return nil
}
