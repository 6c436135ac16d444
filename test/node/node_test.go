package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node's fixed names and addresses. The pod network and the Service
// range are in 198.18.0.0/15 (RFC 2544, benchmarking): addresses on this
// machine only, in namespaces the test makes.
const (
	nodeName   = "bpfleet-node"
	bridgeName = "bpfleet0"
	podCIDR    = "198.18.0.0/24"
	// serviceCIDR's first address is the kubernetes Service's ClusterIP,
	// which kubelet hands every pod as KUBERNETES_SERVICE_HOST.
	serviceCIDR = "198.18.1.0/24"
	apiSvcIP    = "198.18.1.1"
	// otlpIP is where pods reach the Collector, as a fleet's agents reach
	// their gateway.
	otlpIP = "198.18.1.2"
)

// node is a one-node Kubernetes cluster on this host: the control plane
// (test/kube: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler), containerd with Debian's runc and CNI bridge, and a
// kubelet, in a mount namespace of their own whose mounts are shared (as
// systemd makes them on real nodes: the chart's bpffs mount asks for
// HostToContainer propagation). No kube-proxy: the Service addresses pods
// use are forwarded by the test (forward).
type node struct {
	*kube.Cluster
	dir      string
	registry string // host:port of the image registry
	holder   *kube.Proc
	sock     string // containerd's CRI socket
	cleanups []func()
}

// run runs a command, its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// startNode starts everything and waits for the node to be Ready.
func startNode(t *testing.T, registry string) *node {
	t.Helper()
	kubeNode, err := kube.Bin("kube-node", kube.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	containerdDir, err := kube.Bin("containerd", kube.ContainerdVersion)
	if err != nil {
		t.Fatal(err)
	}
	const cniBin = "/usr/lib/cni"
	for _, need := range []string{"/usr/sbin/runc", cniBin + "/bridge", cniBin + "/host-local", cniBin + "/loopback"} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%s missing: run scripts/install-deps.sh (runc, containernetworking-plugins)", need)
		}
	}

	nodeToken := kube.RandomHex(16)
	c, err := kube.Start(kube.Options{
		Tokens:      []string{nodeToken + ",system:node:" + nodeName + ",node-uid,system:nodes"},
		ServiceCIDR: serviceCIDR,
		// The Node authorizer lets the kubelet read what its pods need
		// (Services for their environment, ServiceAccount tokens).
		APIArgs: []string{"--authorization-mode=Node,RBAC"},
	})
	if c != nil {
		t.Cleanup(func() {
			c.Stop() // the kubelet first, so nothing restarts the containers
			reap(t, c.Dir)
			if t.Failed() {
				c.DumpLogs()
				t.Logf("node logs and data kept in %s", c.Dir)
			} else if err := os.RemoveAll(c.Dir); err != nil {
				t.Logf("removing %s: %v", c.Dir, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	n := &node{Cluster: c, dir: c.Dir, registry: registry}
	t.Cleanup(n.cleanup)

	// The API server's Service address, on loopback: a pod's packets reach
	// it through the bridge and are delivered locally.
	_ = run("ip", "addr", "del", apiSvcIP+"/32", "dev", "lo")
	_ = run("ip", "addr", "del", otlpIP+"/32", "dev", "lo")
	_ = run("ip", "link", "del", bridgeName)
	for _, ip := range []string{apiSvcIP, otlpIP} {
		if err := run("ip", "addr", "add", ip+"/32", "dev", "lo"); err != nil {
			t.Fatal(err)
		}
		n.cleanups = append(n.cleanups, func() { _ = run("ip", "addr", "del", ip+"/32", "dev", "lo") })
	}
	n.cleanups = append(n.cleanups, func() { _ = run("ip", "link", "del", bridgeName) })
	forward(t, net.JoinHostPort(apiSvcIP, "443"), fmt.Sprintf("127.0.0.1:%d", c.APIPort))

	kc := func(name, token string) string {
		p := filepath.Join(n.dir, name+".kubeconfig")
		if err := c.Kubeconfig(p, "", token); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The mount namespace holder: containerd and the kubelet enter it.
	n.holder, err = kube.StartProc("mount-namespace", filepath.Join(n.dir, "holder.log"), "/usr/bin/unshare", "--mount", "--propagation", "shared", "--", "/bin/sleep", "infinity")
	if err != nil {
		t.Fatal(err)
	}
	c.Others = append(c.Others, n.holder)
	mntNS := fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Cmd.Process.Pid)
	kube.Eventually(t, 10*time.Second, "the node's mount namespace", func() error {
		a, err := os.Readlink(mntNS)
		if err != nil {
			return err
		}
		b, _ := os.Readlink("/proc/self/ns/mnt")
		if a == b {
			return fmt.Errorf("unshare has not unshared yet")
		}
		return nil
	})
	inNode := func(bin string, args ...string) (string, []string) {
		return "/usr/bin/nsenter", append([]string{"--mount=" + mntNS, "--", bin}, args...)
	}
	env := append(os.Environ(), "PATH="+containerdDir+":/usr/sbin:/usr/bin:/sbin:/bin")

	// containerd with the CRI plugin: images from the test's registry
	// (plain HTTP on loopback), the test's pause image as the sandbox,
	// Debian's runc, the CNI bridge. Without CAP_SYS_RESOURCE (as on these
	// machines) no process may lower its oom_score_adj: containerd keeps
	// every container's at or above its own (restrict_oom_score_adj, as
	// for rootless containerd) instead of runc failing on the sandbox's
	// -998, and the kubelet leaves its own alone.
	n.sock = filepath.Join(n.dir, "containerd.sock")
	certs := filepath.Join(n.dir, "certs.d", registry)
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	hosts := fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registry, registry)
	if err := os.WriteFile(filepath.Join(certs, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	cniConf := filepath.Join(n.dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		t.Fatal(err)
	}
	conflist := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "bpfleet-node", "plugins": [{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}}]}`,
		bridgeName, podCIDR, filepath.Join(n.dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-bpfleet.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`version = 3
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "%s/pause:3.10"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%q]
    conf_dir = %q
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(n.dir, "containerd", "root"), filepath.Join(n.dir, "containerd", "state"), n.sock,
		registry, filepath.Join(n.dir, "certs.d"), cniBin, cniConf)
	configPath := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, args := inNode(filepath.Join(containerdDir, "containerd"), "--config", configPath)
	ctrd, err := kube.StartProcEnv("containerd", filepath.Join(n.dir, "containerd.log"), env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	c.Others = append(c.Others, ctrd)
	if err := kube.WaitFor(ctrd, time.Minute, func() error {
		conn, err := net.Dial("unix", n.sock)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		t.Fatal(err)
	}

	// The controllers: DaemonSets, Deployments and ReplicaSets, the
	// ServiceAccounts and kube-root-ca.crt every namespace needs, garbage
	// collection; and the scheduler, which places DaemonSet pods too.
	port := func() string {
		p, err := kube.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(p)
	}
	// healthy waits for a component's /healthz on its self-signed port.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	healthy := func(p *kube.Proc, port string) {
		if err := kube.WaitFor(p, 2*time.Minute, func() error {
			resp, err := insecure.Get("https://127.0.0.1:" + port + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s /healthz: %s", p.Name, resp.Status)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	cmPort, schedPort := port(), port()
	cm, err := kube.StartProc("kube-controller-manager", filepath.Join(n.dir, "kube-controller-manager.log"), kubeNode, "kube-controller-manager",
		"--kubeconfig="+kc("admin", ""), "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+cmPort,
		"--root-ca-file="+c.CAFile(), "--service-account-private-key-file="+c.SAKeyFile(),
		"--use-service-account-credentials=false")
	if err != nil {
		t.Fatal(err)
	}
	c.Others = append(c.Others, cm)
	sched, err := kube.StartProc("kube-scheduler", filepath.Join(n.dir, "kube-scheduler.log"), kubeNode, "kube-scheduler",
		"--kubeconfig="+kc("admin", ""), "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+schedPort)
	if err != nil {
		t.Fatal(err)
	}
	c.Others = append(c.Others, sched)
	healthy(cm, cmPort)
	healthy(sched, schedPort)

	// The kubelet: cgroupfs driver (this host's cgroups are a v1/v2
	// hybrid, which kubelet 1.37 runs only with failCgroupV1: false),
	// containerd's CRI, no authentication of its own API (loopback only).
	kubeletConf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: 127.0.0.1
port: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
podLogsDir: %s
resolvConf: ""
maxPods: 20
oomScoreAdj: 0
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.sock, port(), port(), filepath.Join(n.dir, "pod-logs"))
	kubeletConfPath := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletConfPath, []byte(kubeletConf), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, args = inNode(kubeNode, "kubelet", "--config="+kubeletConfPath, "--kubeconfig="+kc("kubelet", nodeToken),
		"--hostname-override="+nodeName, "--node-ip=127.0.0.1", "--root-dir="+filepath.Join(n.dir, "kubelet"), "--v=1")
	kubelet, err := kube.StartProcEnv("kubelet", filepath.Join(n.dir, "kubelet.log"), env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	c.Others = append(c.Others, kubelet)

	start := time.Now()
	cs := c.Admin(t)
	if err := kube.WaitFor(kubelet, 3*time.Minute, func() error {
		nd, err := cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range nd.Status.Conditions {
			if cond.Type == "Ready" {
				if cond.Status == "True" {
					return nil
				}
				return fmt.Errorf("node %s not ready: %s: %s", nodeName, cond.Reason, cond.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition", nodeName)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s Ready in %s (kubelet %s, containerd %s, runc from Debian, cgroupfs driver)", nodeName, time.Since(start).Round(time.Millisecond), kube.KubernetesVersion, kube.ContainerdVersion)
	return n
}

// reap kills what outlives containerd and the kubelet: the pods'
// processes (in kubepods cgroups) and their containerd shims (started with
// the node's socket under dir). Nothing of the node may keep running into
// later tests: an agent holds BPF stats on.
func reap(t *testing.T, dir string) {
	for round := 0; round < 50; round++ {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			t.Logf("reaping the node's processes: %v", err)
			return
		}
		left := 0
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); bytes.Contains(st, []byte(") Z ")) {
				continue // a zombie: dead already, its parent reaps it
			}
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cg, []byte("/kubepods")) || bytes.Contains(cmd, []byte(dir)) {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("processes of the node in %s still alive after SIGKILL", dir)
}

func (n *node) cleanup() {
	for i := len(n.cleanups) - 1; i >= 0; i-- {
		n.cleanups[i]()
	}
}

// forward accepts TCP connections on listen and pipes each to target, as
// kube-proxy would for a Service address, until the test ends.
func forward(t *testing.T, listen, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("forwarding %s: %v", listen, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
}

// procStatus is /proc/PID/status as a map.
func procStatus(pid int) (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, sc.Err()
}

// containerPID is the pid of the process named comm in the container id
// (its cgroup path names the id), from the host's /proc.
func containerPID(id, comm string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !bytes.Contains(cg, []byte(id)) {
			continue
		}
		c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(c)) == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %s in container %s", comm, id)
}

// hostProbe is `bpfleet probe -o json` run on the host as root: the
// attach types this kernel supports, asked of the kernel.
func hostProbe(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, err := exec.Command(bin, "probe", "-o", "json").Output()
	if err != nil {
		t.Fatalf("bpfleet probe on the host: %v", err)
	}
	var r struct {
		AttachTypes []struct {
			AttachType string `json:"attach_type"`
			Supported  bool   `json:"supported"`
		} `json:"attach_types"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bpfleet probe -o json: %v", err)
	}
	sup := map[string]bool{}
	for _, a := range r.AttachTypes {
		if a.Supported {
			sup[a.AttachType] = true
		}
	}
	return sup
}

// repoRoot is the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// killPID sends SIGKILL to pid.
func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
