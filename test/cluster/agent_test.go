package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/internal/syncbuf"
)

const (
	// The node the agents run as, and another one whose pods they must
	// not see.
	nodeName  = "node-a"
	otherNode = "node-b"
	// workloadNS holds the pods the tests create.
	workloadNS = "workloads"
)

// The holder process: the re-executed test binary, started in a container
// cgroup, loads a BPF program and holds its fd until its stdin closes.
const holderEnv = "BPFLEET_CLUSTER_HOLDER"

var returnZero = asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}

func loadSocketFilter(name string) (*ebpf.Program, uint32, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.SocketFilter, Instructions: returnZero, License: "GPL"})
	if err != nil {
		return nil, 0, fmt.Errorf("loading a socket filter: %w", err)
	}
	info, err := p.Info()
	if err != nil {
		p.Close()
		return nil, 0, err
	}
	id, _ := info.ID()
	return p, uint32(id), nil
}

func runHolder() {
	p, id, err := loadSocketFilter("cluster_holder")
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", id)
	_, _ = io.Copy(io.Discard, os.Stdin)
	p.Close()
	os.Exit(0)
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		f, pf := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(pf) >= 1 && pf[0] == "cgroup2" {
			return f[4]
		}
	}
	t.Fatal("no cgroup v2 hierarchy mounted (/proc/self/mountinfo): container cgroups cannot be made; mount cgroup2")
	return ""
}

// container is a process in a cgroup laid out as the kubelet's systemd
// driver and containerd lay out a container's, holding a BPF program.
type container struct {
	id     string // 64 hex, as containerd names it
	podUID string
	pid    int
	progID uint32
}

// startContainer makes the cgroup of container id of pod podUID under
// parent and starts the holder in it (CLONE_INTO_CGROUP).
func startContainer(t *testing.T, parent, podUID string) *container {
	t.Helper()
	c := &container{id: randomHex(32), podUID: podUID}
	rel := filepath.Join("kubepods.slice", "kubepods-besteffort.slice",
		"kubepods-besteffort-pod"+strings.ReplaceAll(podUID, "-", "_")+".slice", "cri-containerd-"+c.id+".scope")
	dir := filepath.Join(parent, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("making the container cgroup: %v", err)
	}
	t.Cleanup(func() {
		// Innermost first; shared parents stay while other containers use them.
		for d := dir; d != parent && strings.HasPrefix(d, parent); d = filepath.Dir(d) {
			if os.Remove(d) != nil {
				return
			}
		}
	})
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a process in %s: %v", dir, err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	id, perr := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if err != nil || perr != nil {
		t.Fatalf("holder process: %q %v", line, err)
	}
	c.pid, c.progID = cmd.Process.Pid, uint32(id)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.pid))
	if err != nil || !strings.Contains(string(b), "cri-containerd-"+c.id+".scope") {
		t.Fatalf("holder %d is not in its container cgroup: %s %v", c.pid, b, err)
	}
	return c
}

// The agent binary, built once as the Makefile ships it into the cluster's
// directory.
var buildAgent = sync.OnceValues(func() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(srv.Dir, "bpfleet")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/bpfleet")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building bpfleet: %v\n%s", err, out)
	}
	return bin, nil
})

// agentRun is `bpfleet agent` run on the host as a node's agent: the node
// name in K8S_NODE_NAME and the API server and token in a kubeconfig.
type agentRun struct {
	cmd            *exec.Cmd
	stdout, stderr *syncbuf.Buffer
	base           string // its local API
}

func writeKubeconfig(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.Kubeconfig(p, srv.agentURL(), token); err != nil {
		t.Fatal(err)
	}
	return p
}

var apiAddrRE = regexp.MustCompile(`msg="serving the local API" addr=(\S+)`)

// How an agent finds the API server.
const (
	// inPod: as in the chart's pod, the ServiceAccount's token and the
	// cluster CA in /var/run/secrets/kubernetes.io/serviceaccount (in a
	// mount namespace of the agent's own) and KUBERNETES_SERVICE_HOST/PORT.
	inPod = iota
	// withKubeconfig: as on a host outside any pod, $KUBECONFIG.
	withKubeconfig
)

// inPodScript lays out a pod's ServiceAccount volume in a private mount
// namespace (a tmpfs over /run, so nothing of the host's changes) and
// execs the agent: $1 holds the files, the rest is the command.
const inPodScript = `set -e
mount -t tmpfs -o size=1m tmpfs /run
mkdir -p /run/secrets/kubernetes.io/serviceaccount
cp "$1"/token "$1"/ca.crt "$1"/namespace /run/secrets/kubernetes.io/serviceaccount/
shift
exec "$@"`

func startAgent(t *testing.T, how int, token string, extra ...string) *agentRun {
	t.Helper()
	bin, err := buildAgent()
	if err != nil {
		t.Fatal(err)
	}
	a := &agentRun{stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	args := append([]string{"agent", "--interval", "1s", "--api-addr", "127.0.0.1:0", "--calibrate=false"}, extra...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") && !strings.HasPrefix(kv, "KUBERNETES_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	env = append(env, "K8S_NODE_NAME="+nodeName)
	switch how {
	case inPod:
		sa := t.TempDir()
		ca, err := os.ReadFile(srv.caFile())
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte(releaseNS)} {
			if err := os.WriteFile(filepath.Join(sa, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		host, port, _ := strings.Cut(srv.proxy.addr(), ":")
		env = append(env, "KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port)
		a.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", inPodScript, "sh", sa, bin}, args...)...)
	case withKubeconfig:
		env = append(env, "KUBECONFIG="+writeKubeconfig(t, token))
		a.cmd = exec.Command(bin, args...)
	}
	a.cmd.Env = env
	a.cmd.Stdout, a.cmd.Stderr = a.stdout, a.stderr
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = a.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = a.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", a.stderr.String())
		}
	})
	eventually(t, time.Minute, "agent serving its local API", func() error {
		select {
		case <-done:
			return fmt.Errorf("agent exited: %v\n%s", a.cmd.ProcessState, a.stderr.String())
		default:
		}
		m := apiAddrRE.FindStringSubmatch(a.stderr.String())
		if m == nil {
			return errors.New("no 'serving the local API' line yet")
		}
		a.base = "http://" + m[1]
		return nil
	})
	return a
}

// program fetches one program from the agent's API; found is false on 404.
func (a *agentRun) program(id uint32) (p agent.ProgramStat, found bool, err error) {
	resp, err := http.Get(fmt.Sprintf("%s/v1/programs/%d", a.base, id))
	if err != nil {
		return p, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return p, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return p, false, fmt.Errorf("/v1/programs/%d: %s: %s", id, resp.Status, b)
	}
	return p, true, json.NewDecoder(resp.Body).Decode(&p)
}

// ownerAfterRefresh is the holder's owner entry as the agent's next owner
// refresh sees it. The refresh is forced by loading a program the agent has
// not seen: the scan that first lists it re-reads every owner (and fills
// pod fields from the pod cache at that moment).
func (a *agentRun) ownerAfterRefresh(c *container) (agent.Owner, error) {
	nudge, nudgeID, err := loadSocketFilter("cluster_nudge")
	if err != nil {
		return agent.Owner{}, err
	}
	defer nudge.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, found, err := a.program(nudgeID)
		if err != nil {
			return agent.Owner{}, err
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			return agent.Owner{}, fmt.Errorf("agent did not list program %d within 30s", nudgeID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p, found, err := a.program(c.progID)
	if err != nil || !found {
		return agent.Owner{}, fmt.Errorf("holder's program %d: found %v, %v", c.progID, found, err)
	}
	for _, o := range p.Owners {
		if o.PID == c.pid {
			return o, nil
		}
	}
	return agent.Owner{}, fmt.Errorf("program %d has no owner with pid %d: %+v", c.progID, c.pid, p.Owners)
}

// waitOwner waits (owner refresh after owner refresh) until the holder's
// owner entry passes check.
func (a *agentRun) waitOwner(t *testing.T, what string, c *container, check func(agent.Owner) error) agent.Owner {
	t.Helper()
	var o agent.Owner
	eventually(t, 90*time.Second, what, func() error {
		var err error
		if o, err = a.ownerAfterRefresh(c); err != nil {
			return err
		}
		return check(o)
	})
	return o
}

// named checks that o is the container of pod in the pod's namespace.
func named(c *container, pod *corev1.Pod) func(agent.Owner) error {
	return func(o agent.Owner) error {
		if o.ContainerID != c.id || o.PodUID != string(pod.UID) || o.Runtime != "containerd" ||
			o.PodName != pod.Name || o.PodNamespace != pod.Namespace || o.ContainerName != "app" {
			return fmt.Errorf("owner %+v, want container %s (containerd) of pod %s/%s (%s), container name app", o, c.id, pod.Namespace, pod.Name, pod.UID)
		}
		return nil
	}
}

// unnamed checks that o keeps what its cgroup says and no pod name.
func unnamed(c *container) func(agent.Owner) error {
	return func(o agent.Owner) error {
		if o.ContainerID != c.id || o.PodUID != c.podUID || o.PodName != "" || o.PodNamespace != "" || o.ContainerName != "" {
			return fmt.Errorf("owner %+v, want container %s and pod UID %s from its cgroup and no pod name", o, c.id, c.podUID)
		}
		return nil
	}
}

// workloads makes the namespace of the test pods, once.
var workloads = sync.OnceValue(func() error {
	ctx := context.Background()
	cs, err := kubernetesClient(srv.restConfig(""))
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// No controller manager here: the namespace's default ServiceAccount,
	// which pods refer to, is made by hand.
	_, err = cs.CoreV1().ServiceAccounts(workloadNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	return err
})

// createPod creates a pod bound to node and then writes the status the
// kubelet would once its container runs; start makes the container (its
// cgroup needs the pod's UID) before the status names it.
func createPod(t *testing.T, name, node string, start func(podUID string) *container) (*corev1.Pod, *container) {
	t.Helper()
	if err := workloads(); err != nil {
		t.Fatalf("namespace %s: %v", workloadNS, err)
	}
	ctx := context.Background()
	pods := srv.admin(t).CoreV1().Pods(workloadNS)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	c := start(string(pod.UID))
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        "app",
			ContainerID: "containerd://" + c.id,
			Image:       "registry.example/app:1",
			ImageID:     "registry.example/app@sha256:" + randomHex(32),
			Ready:       true,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	pod, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing pod %s's status: %v", name, err)
	}
	return pod, c
}

func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	zero := int64(0)
	if err := srv.admin(t).CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("deleting pod %s: %v", pod.Name, err)
	}
}

// cgroupParent is this test's own subtree of the cgroup v2 hierarchy.
func cgroupParent(t *testing.T) string {
	t.Helper()
	p := filepath.Join(cgroup2Root(t), "bpfleet-cluster-"+randomHex(4))
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatalf("making a cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(p) })
	return p
}

// watchExpired checks that the server no longer serves a watch of pods from
// rv: it answers 410 Gone (resource version too old).
func watchExpired(t *testing.T, rv string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := srv.admin(t).CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer w.Stop()
	ev, ok := <-w.ResultChan()
	if !ok {
		return errors.New("watch ended without an event")
	}
	if ev.Type == watch.Error {
		if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			t.Logf("watch of pods from resourceVersion %s: %v", rv, err)
			return nil
		} else {
			return err
		}
	}
	return fmt.Errorf("the server still serves pod events from resourceVersion %s (got %s)", rv, ev.Type)
}

// TestAgentAttribution runs the agent with the chart's ServiceAccount token
// and follows a pod's container through real watch events: named while its
// pod exists, not named after the pod is deleted, and again after the API
// server restarts and after the agent's watch expires (410 Gone, etcd
// compacted past it) while pods changed.
func TestAgentAttribution(t *testing.T) {
	logVersion(t)
	registerNode(t, nil) // a node without a pool label: one info line, no warning
	token := agentToken(t)
	parent := cgroupParent(t)
	startIn := func(uid string) *container { return startContainer(t, parent, uid) }

	// A pod of another node first: the agent watches only its own node's
	// pods, so by the time it names pod a it has passed over this one.
	_, other := createPod(t, "elsewhere", otherNode, startIn)
	podA, ctrA := createPod(t, "a", nodeName, startIn)

	a := startAgent(t, inPod, token)
	o := a.waitOwner(t, "pod a named", ctrA, named(ctrA, podA))
	t.Logf("pod a's container: %+v", o)
	if o, err := a.ownerAfterRefresh(other); err != nil {
		t.Fatal(err)
	} else if err := unnamed(other)(o); err != nil {
		t.Errorf("pod of node %s: %v", otherNode, err)
	}

	deletePod(t, podA)
	a.waitOwner(t, "pod a's name gone after its deletion", ctrA, unnamed(ctrA))

	t.Run("api-server-restart", func(t *testing.T) {
		srv.restartAPIServer(t, nil)
		logVersion(t)
		podB, ctrB := createPod(t, "b", nodeName, startIn)
		a.waitOwner(t, "pod b (created after the restart) named", ctrB, named(ctrB, podB))
	})

	t.Run("watch-expired", func(t *testing.T) {
		// Cut the agent off, change pods where it cannot see, move etcd
		// past the agent's resourceVersion and compact it, restart the API
		// server (its watch cache starts over at the compacted revision).
		srv.proxy.pause()
		list, err := srv.admin(t).CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := list.ResourceVersion // at or past anything the agent has seen
		podC, ctrC := createPod(t, "c", nodeName, startIn)
		deletePod(t, podC)
		podD, ctrD := createPod(t, "d", nodeName, startIn)
		srv.restartAPIServer(t, func() {
			rev, err := srv.compactEtcd()
			if err != nil {
				t.Fatalf("compacting etcd: %v", err)
			}
			t.Logf("etcd compacted at revision %d; the agent's watch is at or before %s", rev, seen)
		})
		eventually(t, time.Minute, "410 Gone for a watch from "+seen, func() error { return watchExpired(t, seen) })
		srv.proxy.resume()
		a.waitOwner(t, "pod d (created while the agent was cut off) named", ctrD, named(ctrD, podD))
		a.waitOwner(t, "pod c (created and deleted while cut off) not named", ctrC, unnamed(ctrC))
	})

	// The agent said nothing about its watch on stderr, whatever happened
	// to the server: reconnects and relists are routine.
	for _, l := range strings.Split(a.stderr.String(), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") || strings.HasPrefix(l, "E") || strings.HasPrefix(l, "W") {
			t.Errorf("agent logged: %s", l)
		}
	}
}

// TestAgentWithoutRBAC runs the agent with a token whose ServiceAccount has
// no role: it says so in one line and goes on scanning and exporting, its
// owners keeping the container id and pod UID their cgroups name.
func TestAgentWithoutRBAC(t *testing.T) {
	logVersion(t)
	if err := workloads(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := srv.admin(t).CoreV1().ServiceAccounts(workloadNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-rbac"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := serviceAccountToken(t, workloadNS, "no-rbac")
	parent := cgroupParent(t)
	pod, ctr := createPod(t, "late", nodeName, func(uid string) *container { return startContainer(t, parent, uid) })

	a := startAgent(t, withKubeconfig, token, "--console")
	a.waitOwner(t, "owner from its cgroup alone", ctr, unnamed(ctr))

	// Scanning goes on: snapshots keep coming.
	s1, err := api.FetchSnapshot(ctx, a.base, "")
	if err != nil {
		t.Fatal(err)
	}
	out1 := len(a.stdout.String())
	eventually(t, 30*time.Second, "three more scans and a metrics export", func() error {
		s2, err := api.FetchSnapshot(ctx, a.base, "")
		if err != nil {
			return err
		}
		if s2.Seq < s1.Seq+3 {
			return fmt.Errorf("snapshot seq %d, was %d", s2.Seq, s1.Seq)
		}
		// Export goes on: the console exporter printed the agent's metrics again.
		if out := a.stdout.String(); len(out) <= out1 || !strings.Contains(out[out1:], "bpf.program") {
			return errors.New("no new metrics on the console")
		}
		return nil
	})

	// One line for the pods and one for the node (the pool), each
	// saying what the server refused.
	var forbidden []string
	for _, l := range strings.Split(a.stderr.String(), "\n") {
		if strings.Contains(strings.ToLower(l), "forbidden") && !strings.Contains(l, "no node pool") {
			forbidden = append(forbidden, l)
		}
	}
	if len(forbidden) != 1 {
		t.Fatalf("want one line saying the pods list is forbidden, got %d:\n%s", len(forbidden), strings.Join(forbidden, "\n"))
	}
	if pool := grepLines(a.stderr.String(), "no node pool"); len(pool) != 1 || !strings.Contains(pool[0], "forbidden") || !strings.Contains(pool[0], "get on nodes") {
		t.Errorf("want one line saying the node's get is refused and what to grant, got %q", pool)
	} else {
		t.Logf("the agent said: %s", pool[0])
	}
	t.Logf("the agent said: %s", forbidden[0])
	if !strings.Contains(forbidden[0], "system:serviceaccount:"+workloadNS+":no-rbac") || !strings.Contains(forbidden[0], "pods") {
		t.Errorf("the line does not say who may not list what: %s", forbidden[0])
	}

	// Granted the chart's ClusterRole, the same running agent names the pod:
	// its informer kept retrying.
	role := theRelease(t).object("ClusterRole")
	if role == nil {
		t.Fatal("the chart created no ClusterRole")
	}
	if _, err := srv.admin(t).RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-rbac-granted"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.GetName()},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "no-rbac", Namespace: workloadNS}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.waitOwner(t, "pod named once the role is granted", ctr, named(ctr, pod))
}
