package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testCreated = time.Date(2026, 12, 4, 3, 4, 5, 0, time.UTC)

// testSpec is two platforms with a file from memory, one from disk (src),
// a nested path whose parent Build must add, and a sticky directory.
func testSpec(src string) Spec {
	img := func(arch, variant string) Image {
		return Image{
			Platform: v1.Platform{OS: "linux", Architecture: arch, Variant: variant},
			Files: []File{
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				{Path: "/prog", Mode: 0o755, Data: []byte("binary for " + arch)},
				{Path: "/etc/conf/a.txt", Mode: 0o644, Source: src},
			},
			Entrypoint: []string{"/prog", "run"},
			Env:        []string{"PATH=/"},
		}
	}
	return Spec{
		Images:      []Image{img("amd64", ""), img("arm64", "v8")},
		Created:     testCreated,
		Annotations: map[string]string{"org.opencontainers.image.revision": "abc"},
	}
}

func writeSource(t *testing.T, contents string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a.txt")
	if err := os.WriteFile(p, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func build(t *testing.T, s Spec) v1.ImageIndex {
	t.Helper()
	idx, err := Build(s)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return idx
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	h, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func layoutBytes(t *testing.T, idx v1.ImageIndex, ref string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteLayout(&b, idx, ref); err != nil {
		t.Fatalf("WriteLayout: %v", err)
	}
	return b.Bytes()
}

func TestBuildReproducible(t *testing.T) {
	// Two builds from separate copies of the inputs, the source file
	// rewritten in between (a new inode and mtime): only contents count.
	a := build(t, testSpec(writeSource(t, "conf")))
	time.Sleep(10 * time.Millisecond)
	b := build(t, testSpec(writeSource(t, "conf")))
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatalf("same inputs, index digests %s and %s", da, db)
	}
	la, lb := layoutBytes(t, a, "example.com/x:1"), layoutBytes(t, b, "example.com/x:1")
	if !bytes.Equal(la, lb) {
		t.Fatalf("same index, layout tars differ (sha256 %x, %x)", sha256.Sum256(la), sha256.Sum256(lb))
	}
}

// Every input of the image is in its digest: each change below gives a new
// index digest, and changes to one platform leave the other's manifest.
func TestBuildDigestChanges(t *testing.T) {
	src := writeSource(t, "conf")
	base := build(t, testSpec(src))
	baseM := manifestDigests(t, base)
	for _, tc := range []struct {
		name  string
		edit  func(*Spec)
		alone bool // only the amd64 manifest changes
	}{
		{"one byte of amd64's file", func(s *Spec) { s.Images[0].Files[1].Data = []byte("binary for amd65") }, true},
		{"amd64 file mode", func(s *Spec) { s.Images[0].Files[1].Mode = 0o750 }, true},
		{"amd64 entrypoint", func(s *Spec) { s.Images[0].Entrypoint = []string{"/prog"} }, true},
		{"amd64 env", func(s *Spec) { s.Images[0].Env = nil }, true},
		{"source file contents", func(s *Spec) { s.Images[0].Files[2].Source = writeSource(t, "conF") }, true},
		{"created", func(s *Spec) { s.Created = s.Created.Add(time.Second) }, false},
		{"annotation", func(s *Spec) { s.Annotations = map[string]string{"org.opencontainers.image.revision": "abd"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(src)
			tc.edit(&s)
			idx := build(t, s)
			if digest(t, idx) == digest(t, base) {
				t.Fatalf("index digest %s unchanged", digest(t, idx))
			}
			m := manifestDigests(t, idx)
			if m[0] == baseM[0] {
				t.Errorf("amd64 manifest %s unchanged", m[0])
			}
			if tc.alone != (m[1] == baseM[1]) {
				t.Errorf("arm64 manifest %s, before %s: want changed=%v", m[1], baseM[1], !tc.alone)
			}
		})
	}
}

func manifestDigests(t *testing.T, idx v1.ImageIndex) []v1.Hash {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var hs []v1.Hash
	for _, d := range m.Manifests {
		hs = append(hs, d.Digest)
	}
	return hs
}

// TestImageContents reads back what Build wrote: the index's descriptors,
// each image's manifest, config and the entries of its one layer.
func TestImageContents(t *testing.T) {
	s := testSpec(writeSource(t, "conf"))
	idx := build(t, s)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || im.Annotations["org.opencontainers.image.revision"] != "abc" {
		t.Errorf("index media type %q, annotations %v", im.MediaType, im.Annotations)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(im.Manifests))
	}
	for i, d := range im.Manifests {
		want := s.Images[i]
		// No artifactType: skopeo 1.9 drops it when it copies the index.
		if d.Platform == nil || !d.Platform.Equals(want.Platform) || d.MediaType != types.OCIManifestSchema1 || d.ArtifactType != "" {
			t.Errorf("descriptor %d: platform %v, media type %s, artifact type %q; want %v, OCI manifest, none", i, d.Platform, d.MediaType, d.ArtifactType, want.Platform)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer ||
			m.Annotations["org.opencontainers.image.revision"] != "abc" {
			t.Errorf("%s manifest: config %s, layers %v, annotations %v", want.Platform, m.Config.MediaType, m.Layers, m.Annotations)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OS != "linux" || cfg.Architecture != want.Platform.Architecture || cfg.Variant != want.Platform.Variant ||
			!cfg.Created.Equal(testCreated) || strings.Join(cfg.Config.Entrypoint, " ") != "/prog run" ||
			strings.Join(cfg.Config.Env, " ") != "PATH=/" || len(cfg.RootFS.DiffIDs) != 1 {
			t.Errorf("%s config: %+v", want.Platform, cfg)
		}
		got := layerEntries(t, img)
		wantEntries := []entry{
			{"etc/", tar.TypeDir, 0o755, ""},
			{"etc/conf/", tar.TypeDir, 0o755, ""},
			{"etc/conf/a.txt", tar.TypeReg, 0o644, "conf"},
			{"prog", tar.TypeReg, 0o755, "binary for " + want.Platform.Architecture},
			{"tmp/", tar.TypeDir, 0o1777, ""},
		}
		if len(got) != len(wantEntries) {
			t.Fatalf("%s layer: %+v, want %+v", want.Platform, got, wantEntries)
		}
		for i := range got {
			if got[i].entry != wantEntries[i] {
				t.Errorf("%s layer entry %d: %+v, want %+v", want.Platform, i, got[i].entry, wantEntries[i])
			}
			h := got[i].hdr
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(testCreated) {
				t.Errorf("%s layer %s: owner %d:%d (%q:%q), mtime %v; want 0:0, %v", want.Platform, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, testCreated)
			}
		}
	}
}

type entry struct {
	name string
	typ  byte
	mode int64
	data string
}

type layerEntry struct {
	entry
	hdr *tar.Header
}

func layerEntries(t *testing.T, img v1.Image) []layerEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var es []layerEntry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, layerEntry{entry{h.Name, h.Typeflag, h.Mode, string(b)}, h})
	}
}

func TestBuildRefuses(t *testing.T) {
	file := func(f File) Spec {
		return Spec{Images: []Image{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Files: []File{f}}}}
	}
	for name, s := range map[string]Spec{
		"relative path":      file(File{Path: "prog", Mode: 0o755}),
		"root":               file(File{Path: "/", Mode: fs.ModeDir | 0o755}),
		"symlink":            file(File{Path: "/l", Mode: fs.ModeSymlink | 0o777}),
		"directory contents": file(File{Path: "/d", Mode: fs.ModeDir | 0o755, Data: []byte("x")}),
		"missing source":     file(File{Path: "/p", Mode: 0o755, Source: filepath.Join(t.TempDir(), "none")}),
		"no platform":        {Images: []Image{{Files: []File{{Path: "/p", Mode: 0o644}}}}},
		"no images":          {},
		"file as parent": {Images: []Image{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Files: []File{
			{Path: "/p", Mode: 0o644}, {Path: "/p/q", Mode: 0o644}}}}},
		"path twice": {Images: []Image{{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Files: []File{
			{Path: "/p", Mode: 0o644}, {Path: "/p/", Mode: 0o644}}}}},
	} {
		if _, err := Build(s); err == nil {
			t.Errorf("%s: Build took it", name)
		}
	}
}

// TestWriteLayout unpacks the tar and reads it with go-containerregistry's
// own layout reader: the index in it is the one written, every blob's name
// is its sha256, and index.json names the image for containerd and skopeo.
func TestWriteLayout(t *testing.T) {
	idx := build(t, testSpec(writeSource(t, "conf")))
	dir := t.TempDir()
	var names []string
	tr := tar.NewReader(bytes.NewReader(layoutBytes(t, idx, "registry.example/team/bpfleet:0.1.0")))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			if sum := sha256.Sum256(b); name != hex.EncodeToString(sum[:]) {
				t.Errorf("blob %s has sha256 %x", h.Name, sum)
			}
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// index + 2 x (manifest, config, layer), and the two blob directories.
	if len(names) != 2+7+2 || names[0] != "blobs/" || names[len(names)-2] != "index.json" || names[len(names)-1] != "oci-layout" {
		t.Errorf("layout entries %v", names)
	}
	b, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil || string(b) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q, %v", b, err)
	}
	var top v1.IndexManifest
	b, err = os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].Digest != digest(t, idx) || top.Manifests[0].MediaType != types.OCIImageIndex ||
		top.Manifests[0].Annotations[AnnotationImageName] != "registry.example/team/bpfleet:0.1.0" ||
		top.Manifests[0].Annotations[AnnotationRefName] != "0.1.0" {
		t.Fatalf("index.json %s: want one descriptor of index %s named registry.example/team/bpfleet:0.1.0", b, digest(t, idx))
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	back, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	inner, err := back.ImageIndex(digest(t, idx))
	if err != nil {
		t.Fatalf("reading the index back: %v", err)
	}
	// go-containerregistry's own checks: every digest, size, diff id and
	// platform in the layout agrees with the blobs.
	if err := validate.Index(inner); err != nil {
		t.Errorf("the layout's index does not validate: %v", err)
	}
	wrote, read := manifestDigests(t, idx), manifestDigests(t, inner)
	if len(read) != 2 || read[0] != wrote[0] || read[1] != wrote[1] {
		t.Errorf("read back manifests %v, wrote %v", read, wrote)
	}
	for _, h := range read {
		img, err := inner.Image(h)
		if err != nil {
			t.Fatal(err)
		}
		if es := layerEntries(t, img); len(es) != 5 {
			t.Errorf("image %s read back: layer entries %+v", h, es)
		}
	}
}

func TestWriteLayoutDockerHubName(t *testing.T) {
	idx := build(t, testSpec(writeSource(t, "conf")))
	tr := tar.NewReader(bytes.NewReader(layoutBytes(t, idx, "bpfleet:dev")))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no index.json: %v", err)
		}
		if h.Name != "index.json" {
			continue
		}
		var top v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&top); err != nil {
			t.Fatal(err)
		}
		if n := top.Manifests[0].Annotations[AnnotationImageName]; n != "docker.io/library/bpfleet:dev" {
			t.Errorf("bpfleet:dev named %q, want docker.io/library/bpfleet:dev, as containerd normalizes it", n)
		}
		return
	}
}
