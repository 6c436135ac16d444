package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMakeImageTwoClones: `make image`, as users run it, in two clean
// clones of this commit at different paths, one with the machine's build
// cache and one with an empty GOCACHE, gives the same image, byte for
// byte. Nothing of the path, the cache or the clock may reach the image
// (TestImageReproducible holds bpfleet-image itself to that with small
// binaries; this holds the whole build). The cold build takes about 4 min
// on two cores.
func TestMakeImageTwoClones(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	head := gitOut(t, root, "rev-parse", "HEAD")
	var images [2][]byte
	var digests [2]string
	for i, gocache := range []string{"", t.TempDir()} {
		dir := filepath.Join(t.TempDir(), "bpfleet")
		gitOut(t, "", "clone", "-q", "--shared", root, dir)
		gitOut(t, dir, "checkout", "-q", "--detach", head)
		cmd := exec.Command("make", "-C", dir, "image")
		cmd.Env = os.Environ()
		what := "the machine's GOCACHE"
		if gocache != "" {
			cmd.Env, what = append(cmd.Env, "GOCACHE="+gocache), "an empty GOCACHE"
		}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make image in %s: %v\n%s", dir, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if _, d, ok := strings.Cut(l, ": index "); ok {
				digests[i] = d
			}
		}
		t.Logf("make image in a clone of %.12s with %s: %s in %s", head, what, digests[i], time.Since(start).Round(time.Second))
		if images[i], err = os.ReadFile(filepath.Join(dir, "bin", "bpfleet-image.tar")); err != nil {
			t.Fatal(err)
		}
	}
	if digests[0] == "" || digests[0] != digests[1] || !bytes.Equal(images[0], images[1]) {
		t.Errorf("two clones of one commit built different images: index %q and %q (%d and %d bytes): the build depends on the path, the cache or the clock",
			digests[0], digests[1], len(images[0]), len(images[1]))
	}
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
