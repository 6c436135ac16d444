// Package kube runs a Kubernetes control plane for tests: an embedded etcd
// and kube-apiserver on loopback (test/cluster), and for test/node the
// kube-controller-manager and kube-scheduler beside them, from the binaries
// scripts/build-backends.sh caches. Each server is a child process whose
// log is a file in the cluster's directory, printed when a test fails.
package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
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
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Pinned versions; scripts/build-backends.sh builds exactly these.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
	ContainerdVersion = "v2.4.2"
)

// Bin is a binary scripts/build-backends.sh built; a missing one is an
// error saying what to run (tests fail on it, never skip).
func Bin(name, version string) (string, error) {
	cache := os.Getenv("BPFLEET_CACHE")
	if cache == "" {
		cache = "/var/cache/bpfleet"
	}
	p := filepath.Join(cache, "bin", name+"-"+version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s not found at %s: run scripts/build-backends.sh %s (the first Kubernetes build takes about 25 min on a busy 2-core machine)", name, version, p, name)
	}
	return p, nil
}

// FreePort is a loopback TCP port nothing listens on right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandomHex is n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Proc is a server child process; its output goes to a log file.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
}

// StartProc starts bin with args, its output appended to logPath. The
// child is killed when the test binary dies (a test killed by its timeout
// must not leave servers behind).
func StartProc(name, logPath, bin string, args ...string) (*Proc, error) {
	return StartProcEnv(name, logPath, nil, bin, args...)
}

// StartProcEnv is StartProc with env as the child's whole environment
// (nil: this process's).
func StartProcEnv(name, logPath string, env []string, bin string, args ...string) (*Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== %s %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(append([]string{bin}, args...), " "))
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), Log: logPath, done: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { _ = p.Cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// Exited says whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process with SIGTERM (a clean shutdown), SIGKILL after 30s.
func (p *Proc) Stop() {
	if p == nil || p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// WaitFor polls ready until it succeeds, the process exits or timeout
// passes.
func WaitFor(p *Proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited during startup (%v): see %s", p.Name, p.Cmd.ProcessState, p.Log)
		}
		if last = ready(); last == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v", p.Name, timeout, last)
}

// Options shape the control plane a test needs.
type Options struct {
	// Tokens are more static tokens, "token,user,uid,group" lines of the
	// API server's token file (the admin's is always there).
	Tokens []string
	// ServiceCIDR is the Service IP range (default 10.96.0.0/24); the
	// kubernetes Service takes its first address.
	ServiceCIDR string
	// APIArgs are more kube-apiserver flags, each replacing a default
	// flag of the same name.
	APIArgs []string
}

// Cluster is etcd and kube-apiserver on loopback.
type Cluster struct {
	Dir        string
	APIPort    int
	AdminToken string
	EtcdURL    string

	apiserverBin string
	etcdBin      string
	apiArgs      []string
	etcd         *Proc
	apiserver    *Proc
	// Others are more servers of the cluster's (controller manager,
	// scheduler, kubelet, containerd), stopped first and logged with it.
	Others []*Proc
}

// CAFile is the API server's self-signed serving certificate, its own CA.
func (c *Cluster) CAFile() string { return filepath.Join(c.Dir, "certs", "apiserver.crt") }

// SAKeyFile is the key ServiceAccount tokens are signed with.
func (c *Cluster) SAKeyFile() string { return filepath.Join(c.Dir, "sa.key") }

// APIURL is the API server's address.
func (c *Cluster) APIURL() string { return fmt.Sprintf("https://127.0.0.1:%d", c.APIPort) }

// Start starts etcd and kube-apiserver in a new directory and waits for
// both to be ready. On error the returned cluster (if any) holds what
// started, to stop and log.
func Start(opts Options) (*Cluster, error) {
	apiserverBin, err := Bin("kube-apiserver", KubernetesVersion)
	if err != nil {
		return nil, err
	}
	etcdBin, err := Bin("etcd", EtcdVersion)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bpfleet-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, apiserverBin: apiserverBin, etcdBin: etcdBin, AdminToken: RandomHex(16)}

	// The API server authenticates the test as a cluster admin by a static
	// token; ServiceAccount tokens are signed with one RSA key.
	tokens := fmt.Sprintf("%s,admin,admin-uid,system:masters\n", c.AdminToken)
	for _, t := range opts.Tokens {
		tokens += t + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return c, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return c, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(c.SAKeyFile(), keyPEM, 0o600); err != nil {
		return c, err
	}

	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return c, err
		}
	}
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	start := time.Now()
	if err := c.startEtcd(ports[1]); err != nil {
		return c, err
	}
	etcdUp := time.Since(start)

	serviceCIDR := opts.ServiceCIDR
	if serviceCIDR == "" {
		serviceCIDR = "10.96.0.0/24"
	}
	c.APIPort = ports[2]
	c.apiArgs = append([]string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No kubernetes Service endpoints: they may not be loopback, and
		// nothing here reaches the server through the Service's endpoints.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(c.APIPort),
		// A self-signed serving certificate, generated once and kept
		// across restarts, so the agents' CA file stays valid. It names
		// the advertise address and the kubernetes Service's IP.
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--enable-admission-plugins=PodSecurity",
		// The chart's pod is not privileged: the server must admit it
		// without allowing privileged containers (the default, said here).
		"--allow-privileged=false",
		"--service-account-key-file=" + c.SAKeyFile(),
		"--service-account-signing-key-file=" + c.SAKeyFile(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--profiling=false",
		// On SIGTERM, end open watches (the agents') instead of waiting
		// for them: without it a graceful stop takes the full shutdown
		// timeout.
		"--shutdown-watch-termination-grace-period=5s",
	}, opts.APIArgs...)
	c.apiArgs = lastWins(c.apiArgs)
	if err := c.startAPIServer(); err != nil {
		return c, err
	}
	fmt.Fprintf(os.Stderr, "test/kube: etcd ready in %s, kube-apiserver ready in %s (logs in %s)\n",
		etcdUp.Round(time.Millisecond), (time.Since(start) - etcdUp).Round(time.Millisecond), dir)
	return c, nil
}

// lastWins keeps the last of each --name=value flag, in the place of the
// first: kube-apiserver refuses some flags given twice.
func lastWins(args []string) []string {
	last := map[string]string{}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		last[name] = a
	}
	var out []string
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := last[name]; ok {
			out = append(out, v)
			delete(last, name)
		}
	}
	return out
}

func (c *Cluster) startEtcd(peerPort int) error {
	var err error
	c.etcd, err = StartProc("etcd", filepath.Join(c.Dir, "etcd.log"), c.etcdBin,
		"-data-dir", filepath.Join(c.Dir, "etcd"),
		"-client-url", c.EtcdURL,
		"-peer-url", fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	if err != nil {
		return err
	}
	return WaitFor(c.etcd, 2*time.Minute, func() error {
		resp, err := http.Get(c.EtcdURL + "/health")
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

// startAPIServer starts kube-apiserver (again, after a stop) and waits for
// /readyz: storage, RBAC bootstrap roles and the system priority classes
// are in place then.
func (c *Cluster) startAPIServer() error {
	var err error
	c.apiserver, err = StartProc("kube-apiserver", filepath.Join(c.Dir, "kube-apiserver.log"), c.apiserverBin, c.apiArgs...)
	if err != nil {
		return err
	}
	return WaitFor(c.apiserver, 4*time.Minute, func() error {
		client, err := c.HTTPClient()
		if err != nil {
			return err
		}
		req, _ := http.NewRequest("GET", c.APIURL()+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
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

// RestartAPIServer stops kube-apiserver (SIGTERM) and starts it again on
// the same port, certificate and etcd, calling between in between.
func (c *Cluster) RestartAPIServer(t testing.TB, between func()) {
	t.Helper()
	start := time.Now()
	c.apiserver.Stop()
	t.Logf("kube-apiserver stopped in %s (%v)", time.Since(start).Round(time.Millisecond), c.apiserver.Cmd.ProcessState)
	if between != nil {
		between()
	}
	start = time.Now()
	if err := c.startAPIServer(); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver ready again in %s", time.Since(start).Round(time.Millisecond))
}

// HTTPClient trusts the API server's self-signed certificate, once written.
func (c *Cluster) HTTPClient() (*http.Client, error) {
	pemCA, err := os.ReadFile(c.CAFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("no certificate in %s", c.CAFile())
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// Stop stops every server, the others first.
func (c *Cluster) Stop() {
	for i := len(c.Others) - 1; i >= 0; i-- {
		c.Others[i].Stop()
	}
	c.apiserver.Stop()
	c.etcd.Stop()
}

// DumpLogs prints the end of each server's log.
func (c *Cluster) DumpLogs() {
	logs := []string{filepath.Join(c.Dir, "etcd.log"), filepath.Join(c.Dir, "kube-apiserver.log")}
	for _, p := range c.Others {
		logs = append(logs, p.Log)
	}
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		fmt.Fprintf(os.Stderr, "---- last %d lines of %s\n%s\n", len(lines), name, strings.Join(lines, "\n"))
	}
}

// RestConfig is a client config for token (the admin's when empty).
func (c *Cluster) RestConfig(token string) *rest.Config {
	if token == "" {
		token = c.AdminToken
	}
	return &rest.Config{
		Host:            c.APIURL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile()},
		QPS:             50,
		Burst:           100,
		// Warnings of an admin call are a test failure where they matter
		// (collected there); elsewhere they are noise.
		WarningHandler: rest.NoWarnings{},
	}
}

// Admin is a client with the admin's token.
func (c *Cluster) Admin(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RestConfig(""))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig for token to path (the admin's when
// empty) pointing at server (the API server's own address when empty).
func (c *Cluster) Kubeconfig(path, server, token string) error {
	if token == "" {
		token = c.AdminToken
	}
	if server == "" {
		server = c.APIURL()
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, server, c.CAFile(), token)
	return os.WriteFile(path, []byte(kc), 0o600)
}

// Eventually retries check until it succeeds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
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
