package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/bpfleet/bpfleet/internal/ociimage"
	"github.com/bpfleet/bpfleet/test/registry"
	"github.com/bpfleet/bpfleet/test/testimage"
)

// The tests pack small real binaries in bpfleet's places: test/node/pause
// built as the Makefile builds bpfleet (CGO_ENABLED=0, -trimpath,
// -ldflags '-s -w -buildid='), and, as bpfleet-agent, the same without
// -s -w so that the two differ. Cross-building bpfleet itself for arm64
// takes minutes on two busy cores; make image does that.
var (
	arches = []string{"amd64", "arm64"}
	// binDirs are two separate builds of the same binaries: dir/linux-ARCH.
	binDirs [2]string
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		tmp, err := os.MkdirTemp("", "bpfleet-image-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(tmp)
		for i := range binDirs {
			binDirs[i] = filepath.Join(tmp, fmt.Sprint("build", i))
			for _, arch := range arches {
				if err := buildBinaries(filepath.Join(binDirs[i], "linux-"+arch), arch); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
		}
		return m.Run()
	}())
}

func buildBinaries(dir, arch string) error {
	for b, ldflags := range map[string]string{"bpfleet": "-s -w -buildid=", "bpfleet-agent": "-buildid="} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+ldflags, "-o", filepath.Join(dir, b), testimage.PausePackage)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s for %s: %v\n%s", b, arch, err, out)
		}
	}
	return nil
}

// imageArgs are make image's flags for the binaries in dir.
func imageArgs(out, dir string, more ...string) []string {
	return append([]string{
		"-o", out, "-name", "registry.example/bpfleet:0.1.0",
		"-revision", "0123456789abcdef0123456789abcdef01234567", "-version", "v0.1.0-3-g0123456",
		"-created", "2026-12-04T03:20:11+01:00",
		"-platform", "linux/amd64=" + filepath.Join(dir, "linux-amd64"),
		"-platform", "linux/arm64/v8=" + filepath.Join(dir, "linux-arm64"),
	}, more...)
}

func runImage(t *testing.T, args []string) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, args, &out, io.Discard); err != nil {
		t.Fatalf("bpfleet-image %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

type tarFile struct {
	hdr  *tar.Header
	data []byte
}

// tarFiles reads every entry of a tar stream, in order.
func tarFiles(t *testing.T, r io.Reader) []tarFile {
	t.Helper()
	var files []tarFile
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, tarFile{h, b})
	}
}

// layoutIndex reads the image index out of a layout tar, by way of its
// index.json, with every file's contents by name.
func layoutIndex(t *testing.T, path string) (v1.Hash, v1.IndexManifest, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	for _, tf := range tarFiles(t, f) {
		files[tf.hdr.Name] = tf.data
	}
	var top, idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &top); err != nil || len(top.Manifests) != 1 {
		t.Fatalf("%s: index.json %s (%v): want one descriptor", path, files["index.json"], err)
	}
	h := top.Manifests[0].Digest
	if err := json.Unmarshal(files["blobs/sha256/"+h.Hex], &idx); err != nil {
		t.Fatalf("%s: index %s: %v", path, h, err)
	}
	return h, idx, files
}

func TestImageReproducible(t *testing.T) {
	for _, arch := range arches {
		for _, b := range binaries {
			p0, p1 := filepath.Join(binDirs[0], "linux-"+arch, b), filepath.Join(binDirs[1], "linux-"+arch, b)
			b0, err0 := os.ReadFile(p0)
			b1, err1 := os.ReadFile(p1)
			if err0 != nil || err1 != nil || !bytes.Equal(b0, b1) {
				t.Errorf("two builds of %s for %s differ (%v, %v): the Makefile's flags do not build reproducibly", b, arch, err0, err1)
			}
		}
	}
	tmp := t.TempDir()
	out0, out1 := filepath.Join(tmp, "a.tar"), filepath.Join(tmp, "b.tar")
	stdout0 := runImage(t, imageArgs(out0, binDirs[0]))
	// The second image a clock second later: nothing in it may come from
	// the clock.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	stdout1 := runImage(t, imageArgs(out1, binDirs[1]))
	t0, err0 := os.ReadFile(out0)
	t1, err1 := os.ReadFile(out1)
	if err0 != nil || err1 != nil || !bytes.Equal(t0, t1) {
		t.Errorf("two images of the same binaries and flags differ (%v, %v)", err0, err1)
	}
	h0, _, _ := layoutIndex(t, out0)
	h1, _, _ := layoutIndex(t, out1)
	if h0 != h1 {
		t.Errorf("index digests %s and %s", h0, h1)
	}
	if !strings.Contains(stdout0, h0.String()) || stdout0 != strings.Replace(stdout1, out1, out0, 1) {
		t.Errorf("output %q, then %q: want the index digest %s twice", stdout0, stdout1, h0)
	}
	t.Logf("%s", stdout0)
}

// A changed binary changes its platform's manifest and the index, not the
// other platform's; a changed version flag changes both.
func TestImageDigestChanges(t *testing.T) {
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base.tar")
	runImage(t, imageArgs(base, binDirs[0]))
	baseH, baseIdx, _ := layoutIndex(t, base)

	changed := filepath.Join(tmp, "bin")
	if err := os.CopyFS(changed, os.DirFS(binDirs[0])); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(changed, "linux-arm64", "bpfleet-agent")
	b, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	// One byte more at the end, where no ELF reader looks.
	if err := os.WriteFile(agent, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "changed.tar")
	runImage(t, imageArgs(out, changed))
	h, idx, _ := layoutIndex(t, out)
	if h == baseH {
		t.Errorf("arm64 bpfleet-agent changed, index digest %s did not", h)
	}
	if idx.Manifests[0].Digest != baseIdx.Manifests[0].Digest || idx.Manifests[1].Digest == baseIdx.Manifests[1].Digest {
		t.Errorf("arm64 bpfleet-agent changed: manifests %s %s, before %s %s; want amd64's the same, arm64's new",
			idx.Manifests[0].Digest, idx.Manifests[1].Digest, baseIdx.Manifests[0].Digest, baseIdx.Manifests[1].Digest)
	}

	out = filepath.Join(tmp, "version.tar")
	runImage(t, append(imageArgs(out, binDirs[0]), "-version", "v0.1.1"))
	h, idx, _ = layoutIndex(t, out)
	if h == baseH || idx.Manifests[0].Digest == baseIdx.Manifests[0].Digest || idx.Manifests[1].Digest == baseIdx.Manifests[1].Digest {
		t.Errorf("-version changed: index %s, manifests %s %s; all the same as before", h, idx.Manifests[0].Digest, idx.Manifests[1].Digest)
	}
}

// TestImagePush pushes to a registry on loopback, pulls the index back and
// compares it with the tar's, and each platform's files with the binaries.
func TestImagePush(t *testing.T) {
	addr, stop := registry.Start()
	defer stop()
	ref := addr + "/bpfleet:0.1.0"
	out := filepath.Join(t.TempDir(), "image.tar")
	stdout := runImage(t, imageArgs(out, binDirs[0], "-push", ref))
	tarH, tarIdx, blobs := layoutIndex(t, out)
	if !strings.Contains(stdout, "pushed "+ref+" ("+tarH.String()+")") {
		t.Errorf("output %q does not say it pushed %s", stdout, tarH)
	}

	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	h, err := idx.Digest()
	if err != nil || h != tarH {
		t.Fatalf("pulled index %s (%v), the tar's %s", h, err, tarH)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("the pulled index does not validate: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/bpfleet/bpfleet",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.version":  "v0.1.0-3-g0123456",
		"org.opencontainers.image.created":  "2026-12-04T02:20:11Z",
	}
	checkAnnotations(t, "index", m.Annotations, wantAnn)
	wantPlatforms := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}}
	if len(m.Manifests) != len(wantPlatforms) {
		t.Fatalf("index has %d manifests, want %d", len(m.Manifests), len(wantPlatforms))
	}
	for i, d := range m.Manifests {
		want := wantPlatforms[i]
		if d.Platform == nil || !d.Platform.Equals(want) || d.Digest != tarIdx.Manifests[i].Digest {
			t.Errorf("manifest %d: %s %v, want %v, %s as in the tar", i, d.Digest, d.Platform, want, tarIdx.Manifests[i].Digest)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		man, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		checkAnnotations(t, want.String()+" manifest", man.Annotations, wantAnn)
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != want.OS || cfg.Architecture != want.Architecture || cfg.Variant != want.Variant ||
			cfg.Created.UTC().Format(time.RFC3339) != "2026-12-04T02:20:11Z" ||
			strings.Join(cfg.Config.Entrypoint, " ") != "/bpfleet" || strings.Join(cfg.Config.Env, " ") != "PATH=/" ||
			cfg.Config.User != "" || len(cfg.Config.Cmd) != 0 {
			t.Errorf("%s config %+v", want, cfg)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: layers %v (%v), want one", want, layers, err)
		}
		ld, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := blobs["blobs/sha256/"+ld.Hex]; !ok {
			t.Errorf("%s layer %s is not in the tar", want, ld)
		}
		checkFiles(t, want, layers[0], filepath.Join(binDirs[0], "linux-"+want.Architecture))
	}
}

func checkAnnotations(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s annotation %s=%q, want %q", what, k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s annotations %v, want %v", what, got, want)
	}
}

// checkFiles wants the layer to be exactly the two binaries and /tmp.
func checkFiles(t *testing.T, p v1.Platform, l v1.Layer, dir string) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	for _, tf := range tarFiles(t, rc) {
		h := tf.hdr
		got = append(got, fmt.Sprintf("%s %o %d:%d", h.Name, h.Mode, h.Uid, h.Gid))
		if h.Typeflag != tar.TypeReg {
			continue
		}
		want, err := os.ReadFile(filepath.Join(dir, h.Name))
		if err != nil || !bytes.Equal(tf.data, want) {
			t.Errorf("%s /%s: %d bytes pulled, not the %d of %s (%v)", p, h.Name, len(tf.data), len(want), filepath.Join(dir, h.Name), err)
		}
	}
	if want := "bpfleet 755 0:0, bpfleet-agent 755 0:0, tmp/ 1777 0:0"; strings.Join(got, ", ") != want {
		t.Errorf("%s layer entries %q, want %q", p, strings.Join(got, ", "), want)
	}
}

func TestImageRefuses(t *testing.T) {
	tmp := t.TempDir()
	// An amd64 binary in arm64's place.
	swapped := filepath.Join(tmp, "swapped")
	if err := os.CopyFS(swapped, os.DirFS(binDirs[0])); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(binDirs[0], "linux-amd64", "bpfleet"), filepath.Join(swapped, "linux-arm64", "bpfleet"))
	// A dynamically linked binary of this machine's architecture.
	dynamic := filepath.Join(tmp, "dynamic")
	if err := os.CopyFS(dynamic, os.DirFS(binDirs[0])); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "/bin/true", filepath.Join(dynamic, "linux-"+runtime.GOARCH, "bpfleet-agent"))

	out := filepath.Join(tmp, "image.tar")
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		usage bool
	}{
		{"binary of another arch", imageArgs(out, swapped), "build it with GOARCH=arm64", false},
		{"dynamic binary", imageArgs(out, dynamic), "build it with CGO_ENABLED=0", false},
		{"missing binaries", imageArgs(out, tmp), "make image builds it", false},
		{"no revision", append(imageArgs(out, binDirs[0]), "-revision", ""), "-revision, -version and -created are required", true},
		{"bad time", append(imageArgs(out, binDirs[0]), "-created", "yesterday"), "-created", true},
		{"bad platform", []string{"-platform", "linux"}, "want OS/ARCH[/VARIANT]=DIR", true},
		{"no platform", []string{"-revision", "x", "-version", "x", "-created", "2026-12-04T03:20:11Z"}, "no -platform", true},
	} {
		err := run(context.Background(), tc.args, io.Discard, io.Discard)
		var usage usageError
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &usage) != tc.usage {
			t.Errorf("%s: error %v, want one saying %q (usage error: %v)", tc.name, err, tc.want, tc.usage)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused builds left %s (%v)", out, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// The tar's index.json names the image as -name says, for ctr and skopeo.
func TestImageName(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image.tar")
	runImage(t, imageArgs(out, binDirs[0]))
	_, _, files := layoutIndex(t, out)
	var top v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatal(err)
	}
	if a := top.Manifests[0].Annotations; a[ociimage.AnnotationImageName] != "registry.example/bpfleet:0.1.0" || a[ociimage.AnnotationRefName] != "0.1.0" {
		t.Errorf("index.json annotations %v", a)
	}
}
