package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/test/kube"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// srv is the cluster every test in the package shares, started by TestMain.
var srv *cluster

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) == "1" {
		runHolder()
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	c, err := startCluster()
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/cluster: %v\n", err)
		if c != nil {
			c.stop()
			c.DumpLogs()
		}
		return 1
	}
	srv = c
	code := m.Run()
	c.stop()
	if code != 0 {
		c.DumpLogs()
		fmt.Fprintf(os.Stderr, "test/cluster: server logs and data kept in %s\n", c.Dir)
	} else {
		os.RemoveAll(c.Dir)
	}
	return code
}

// cluster is the control plane (test/kube) with a proxy in front of the
// API server for the agents (so a test can cut them off alone).
type cluster struct {
	*kube.Cluster
	proxy *proxy
}

// agentURL is the API server as the agents reach it: through the proxy.
func (c *cluster) agentURL() string { return "https://" + c.proxy.addr() }

func (c *cluster) caFile() string { return c.CAFile() }

func (c *cluster) restConfig(token string) *rest.Config { return c.RestConfig(token) }

func (c *cluster) admin(t testing.TB) *kubernetes.Clientset { return c.Admin(t) }

func (c *cluster) restartAPIServer(t *testing.T, between func()) { c.RestartAPIServer(t, between) }

func startCluster() (*cluster, error) {
	k, err := kube.Start(kube.Options{})
	if k == nil {
		return nil, err
	}
	c := &cluster{Cluster: k}
	if err != nil {
		return c, err
	}
	c.proxy, err = newProxy(fmt.Sprintf("127.0.0.1:%d", c.APIPort))
	return c, err
}

func (c *cluster) stop() {
	if c.proxy != nil {
		c.proxy.close()
	}
	c.Stop()
}

func kubernetesClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(cfg)
}

func randomHex(n int) string { return kube.RandomHex(n) }

func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	kube.Eventually(t, timeout, what, check)
}

// logVersion logs (and checks) the server's version from GET /version: the
// build must say the version it was built from.
func logVersion(t *testing.T) {
	t.Helper()
	v, err := srv.admin(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("GET /version: %v", err)
	}
	t.Logf("kube-apiserver %s (%s, %s)", v.GitVersion, v.GoVersion, v.Platform)
	if v.GitVersion != kube.KubernetesVersion {
		t.Fatalf("GET /version says %s, want %s: rebuild with scripts/build-backends.sh (version ldflags)", v.GitVersion, kube.KubernetesVersion)
	}
}

// etcdCall posts a JSON request to etcd's gRPC gateway.
func (c *cluster) etcdCall(path string, req any) (map[string]any, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := http.Post(c.EtcdURL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd %s: %s: %s", path, resp.Status, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("etcd %s: %w: %s", path, err, b)
	}
	return out, nil
}

// compactEtcd writes a key outside the API server's prefix (so the
// revision moves past every resourceVersion handed out so far) and
// compacts etcd's history up to it: older resourceVersions are gone.
func (c *cluster) compactEtcd() (int64, error) {
	put, err := c.etcdCall("/v3/kv/put", map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte("/bpfleet-test/bump")),
		"value": base64.StdEncoding.EncodeToString([]byte(time.Now().String())),
	})
	if err != nil {
		return 0, err
	}
	hdr, _ := put["header"].(map[string]any)
	revS, _ := hdr["revision"].(string)
	rev, err := strconv.ParseInt(revS, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd put: no revision in %v", put)
	}
	if _, err := c.etcdCall("/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}); err != nil {
		return 0, err
	}
	return rev, nil
}

// proxy forwards TCP connections to the API server. pause cuts every
// connection through it and refuses new ones until resume: the agents lose
// the server while the test's own client keeps it.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	paused bool
	conns  map[net.Conn]struct{}
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.paused {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.pipe(c)
	}
}

func (p *proxy) pipe(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.paused {
		p.mu.Unlock()
		up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
}

func (p *proxy) close() {
	p.pause()
	p.ln.Close()
}
