package testimage

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bpfleet/bpfleet/test/registry"
)

// TestPause pushes the pause image to a loopback registry, pulls it back,
// and runs the /pause it holds as pid 1 of a new pid namespace, as in a
// pod: it reaps an orphan that a container leaves behind and exits 0 on
// SIGTERM.
func TestPause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr, stop := registry.Start()
	defer stop()
	ref := addr + "/pause:test"
	h, err := PushPause(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	if got, err := idx.Digest(); err != nil || got != h {
		t.Fatalf("pulled index %s (%v), pushed %s", got, err, h)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index %+v (%v), want one manifest", m, err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/pause" {
		t.Errorf("entrypoint %q, want /pause", cfg.Config.Entrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v (%v), want one", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != "pause" || hdr.Mode != 0o755 {
		t.Fatalf("first layer entry %+v (%v), want pause, mode 0755", hdr, err)
	}
	bin := filepath.Join(t.TempDir(), "pause")
	f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, tr); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if next, err := tr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("layer has more than /pause: %+v", next)
	}
	requireStatic(t, bin)
	runPause(t, bin)
}

func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s asks for a dynamic loader: the image has none", bin)
		}
	}
}

func runPause(t *testing.T, bin string) {
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Skipf("starting pause in a new pid namespace: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	pid := cmd.Process.Pid

	// A process in the namespace starts a child and exits: the child is
	// reparented to pid 1, pause, which must reap it once it is killed.
	// (Its output goes nowhere: a pipe would keep nsenter's caller waiting.)
	nsenter := exec.Command("nsenter", "--target", strconv.Itoa(pid), "--pid", "--", "/bin/sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & exit 0")
	if err := nsenter.Run(); err != nil {
		t.Fatalf("nsenter: %v", err)
	}
	orphans := children(t, pid)
	if len(orphans) != 1 {
		t.Fatalf("pause has children %v, want the one orphan", orphans)
	}
	orphan, err := strconv.Atoi(orphans[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(orphan, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(children(t, pid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pause still has child %d 30 s after it was killed: it does not reap", orphan)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the deferred kill
		if err != nil {
			t.Fatalf("pause on SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("pause still runs 30 s after SIGTERM")
	}
}

// children lists the pids of pid's children (zombies included) from every
// thread's /proc children file: any thread of a reaper may adopt orphans.
func children(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("pause's /proc children files: %v (%d)", err, len(tasks))
	}
	var pids []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}
