package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Pinned versions; scripts/build-backends.sh builds exactly these.
const (
	kubernetesVersion = "v1.37.2"
	etcdVersion       = "v3.7.3"
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
			c.dumpLogs()
		}
		return 1
	}
	srv = c
	code := m.Run()
	c.stop()
	if code != 0 {
		c.dumpLogs()
		fmt.Fprintf(os.Stderr, "test/cluster: server logs and data kept in %s\n", c.dir)
	} else {
		os.RemoveAll(c.dir)
	}
	return code
}

// cacheBin is a binary scripts/build-backends.sh built; a missing one fails
// the run with what to do, never skips it.
func cacheBin(name, version string) (string, error) {
	cache := os.Getenv("BPFLEET_CACHE")
	if cache == "" {
		cache = "/var/cache/bpfleet"
	}
	p := filepath.Join(cache, "bin", name+"-"+version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s not found at %s: run scripts/build-backends.sh kube-apiserver etcd (the first kube-apiserver build takes about 25 min on a busy 2-core machine)", name, version, p)
	}
	return p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a server child process; its output goes to a log file in the
// cluster's directory, printed when a test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== %s %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(append([]string{bin}, args...), " "))
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// A test binary killed by its timeout must not leave servers behind.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process with SIGTERM (a clean shutdown), SIGKILL after 30s.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cluster is etcd and kube-apiserver on loopback, with a proxy in front of
// the API server for the agents (so a test can cut them off alone).
type cluster struct {
	dir          string
	apiserverBin string
	etcdBin      string
	etcdURL      string
	apiPort      int
	apiArgs      []string
	adminToken   string
	etcd         *proc
	apiserver    *proc
	proxy        *proxy
}

func (c *cluster) caFile() string { return filepath.Join(c.dir, "certs", "apiserver.crt") }
func (c *cluster) apiURL() string { return fmt.Sprintf("https://127.0.0.1:%d", c.apiPort) }

// agentURL is the API server as the agents reach it: through the proxy.
func (c *cluster) agentURL() string { return "https://" + c.proxy.addr() }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func startCluster() (*cluster, error) {
	apiserverBin, err := cacheBin("kube-apiserver", kubernetesVersion)
	if err != nil {
		return nil, err
	}
	etcdBin, err := cacheBin("etcd", etcdVersion)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bpfleet-cluster-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, apiserverBin: apiserverBin, etcdBin: etcdBin, adminToken: randomHex(16)}

	// The API server authenticates the test as a cluster admin by a static
	// token; ServiceAccount tokens are signed with one RSA key.
	tokens := fmt.Sprintf("%s,admin,admin-uid,system:masters\n", c.adminToken)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return c, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return c, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		return c, err
	}

	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return c, err
		}
	}
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	start := time.Now()
	if err := c.startEtcd(ports[1]); err != nil {
		return c, err
	}
	etcdUp := time.Since(start)

	c.apiPort = ports[2]
	c.apiArgs = []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No kubernetes Service endpoints: they may not be loopback, and
		// nothing here reaches the server through the Service.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		// A self-signed serving certificate, generated once and kept
		// across restarts, so the agents' CA file stays valid.
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--enable-admission-plugins=PodSecurity",
		// The chart's pod is not privileged: the server must admit it
		// without allowing privileged containers (the default, said here).
		"--allow-privileged=false",
		"--service-account-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--profiling=false",
		// On SIGTERM, end open watches (the agents') instead of waiting
		// for them: without it a graceful stop takes the full shutdown
		// timeout.
		"--shutdown-watch-termination-grace-period=5s",
	}
	if err := c.startAPIServer(); err != nil {
		return c, err
	}
	fmt.Fprintf(os.Stderr, "test/cluster: etcd ready in %s, kube-apiserver ready in %s (logs in %s)\n",
		etcdUp.Round(time.Millisecond), (time.Since(start) - etcdUp).Round(time.Millisecond), dir)
	c.proxy, err = newProxy(fmt.Sprintf("127.0.0.1:%d", c.apiPort))
	if err != nil {
		return c, err
	}
	return c, nil
}

func (c *cluster) startEtcd(peerPort int) error {
	var err error
	c.etcd, err = startProc("etcd", filepath.Join(c.dir, "etcd.log"), c.etcdBin,
		"-data-dir", filepath.Join(c.dir, "etcd"),
		"-client-url", c.etcdURL,
		"-peer-url", fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	if err != nil {
		return err
	}
	return waitFor(c.etcd, 2*time.Minute, func() error {
		resp, err := http.Get(c.etcdURL + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !bytes.Contains(b, []byte(`"health":"true"`)) {
			return fmt.Errorf("etcd /health: %s", b)
		}
		return nil
	})
}

// startAPIServer starts kube-apiserver (again, after stopAPIServer) and
// waits for /readyz: storage, RBAC bootstrap roles and the system priority
// classes are in place then.
func (c *cluster) startAPIServer() error {
	var err error
	c.apiserver, err = startProc("kube-apiserver", filepath.Join(c.dir, "kube-apiserver.log"), c.apiserverBin, c.apiArgs...)
	if err != nil {
		return err
	}
	return waitFor(c.apiserver, 4*time.Minute, func() error {
		client, err := c.httpClient()
		if err != nil {
			return err
		}
		req, _ := http.NewRequest("GET", c.apiURL()+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("kube-apiserver /readyz: %s: %s", resp.Status, b)
		}
		return nil
	})
}

// restartAPIServer stops kube-apiserver (SIGTERM) and starts it again on
// the same port, certificate and etcd.
func (c *cluster) restartAPIServer(t *testing.T, between func()) {
	t.Helper()
	start := time.Now()
	c.apiserver.stop()
	t.Logf("kube-apiserver stopped in %s (%v)", time.Since(start).Round(time.Millisecond), c.apiserver.cmd.ProcessState)
	if between != nil {
		between()
	}
	start = time.Now()
	if err := c.startAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver ready again in %s", time.Since(start).Round(time.Millisecond))
}

// httpClient trusts the API server's self-signed certificate, once written.
func (c *cluster) httpClient() (*http.Client, error) {
	pemCA, err := os.ReadFile(c.caFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("no certificate in %s", c.caFile())
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// waitFor polls ready until it succeeds, the process exits or timeout passes.
func waitFor(p *proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited during startup (%v): see its log", p.name, p.cmd.ProcessState)
		}
		if last = ready(); last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v", p.name, timeout, last)
}

func (c *cluster) stop() {
	if c.proxy != nil {
		c.proxy.close()
	}
	c.apiserver.stop()
	c.etcd.stop()
}

// dumpLogs prints the end of each server's log.
func (c *cluster) dumpLogs() {
	for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
		b, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		fmt.Fprintf(os.Stderr, "---- last %d lines of %s\n%s\n", len(lines), filepath.Join(c.dir, name), strings.Join(lines, "\n"))
	}
}

// restConfig is a client config for token (the admin's when empty).
func (c *cluster) restConfig(token string) *rest.Config {
	if token == "" {
		token = c.adminToken
	}
	return &rest.Config{
		Host:            c.apiURL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.caFile()},
		QPS:             50,
		Burst:           100,
		// Warnings of an admin call are a test failure where they matter
		// (collected there); elsewhere they are noise.
		WarningHandler: rest.NoWarnings{},
	}
}

func kubernetesClient(cfg *rest.Config) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(cfg)
}

func (c *cluster) admin(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetesClient(c.restConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	return cs
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
	if v.GitVersion != kubernetesVersion {
		t.Fatalf("GET /version says %s, want %s: rebuild with scripts/build-backends.sh (version ldflags)", v.GitVersion, kubernetesVersion)
	}
}

// etcdCall posts a JSON request to etcd's gRPC gateway.
func (c *cluster) etcdCall(path string, req any) (map[string]any, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := http.Post(c.etcdURL+path, "application/json", bytes.NewReader(body))
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

// eventually retries check until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s: %v", what, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
