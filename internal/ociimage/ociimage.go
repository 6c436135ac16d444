// Package ociimage builds reproducible OCI images from lists of files, with
// go-containerregistry and no container daemon: one gzip layer per platform
// whose entries are sorted, owned by 0:0, carry the mode given and one fixed
// mtime, so the same files and Spec give the same digests on any machine. It
// writes an image index as an OCI image layout tar (layout.go) and pushes it
// to a registry (Push).
package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of an image's layer.
type File struct {
	// Path is where it lies in the image, absolute ("/bpfleet", "/tmp").
	// Missing parent directories are added with mode 0755.
	Path string
	// Mode holds the permission bits (with fs.ModeSetuid, fs.ModeSetgid,
	// fs.ModeSticky) and fs.ModeDir for a directory; no other type.
	Mode fs.FileMode
	// Data is a regular file's contents; Source, if set instead, names a
	// host file that Build reads them from.
	Data   []byte
	Source string
}

// Image is one platform's image of a Spec.
type Image struct {
	// Platform of the files (OS linux, Architecture amd64, Variant...);
	// it goes in the image config and the index's descriptor.
	Platform   v1.Platform
	Files      []File
	Entrypoint []string
	// Env is the process environment, "KEY=value".
	Env []string
}

// Spec is a multi-platform image.
type Spec struct {
	Images []Image
	// Created is every entry's mtime, the config's created time and its
	// one history entry's (whole seconds, UTC); zero means the Unix epoch.
	Created time.Time
	// Annotations go on the index and on every image manifest.
	Annotations map[string]string
}

// Build returns the OCI image index of s: one image manifest per Image, in
// the order given, each with one layer.
func Build(s Spec) (v1.ImageIndex, error) {
	if len(s.Images) == 0 {
		return nil, fmt.Errorf("no images to build")
	}
	created := s.Created.Truncate(time.Second).UTC()
	if s.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, im := range s.Images {
		img, err := buildImage(im, created, s.Annotations)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", im.Platform.String(), err)
		}
		p := im.Platform
		adds = append(adds, mutate.IndexAddendum{Add: plainImage{img}, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	if len(s.Annotations) > 0 {
		idx = mutate.Annotations(idx, s.Annotations).(v1.ImageIndex)
	}
	// Compute the index manifest now: an error in it is Build's, not a
	// later Digest's.
	if _, err := idx.Digest(); err != nil {
		return nil, err
	}
	return idx, nil
}

// plainImage is an image whose index descriptor has no artifactType:
// go-containerregistry would set the config's media type there, which
// tools that predate OCI 1.1 (skopeo 1.9) drop when they copy the index,
// changing its digest, and which runnable images of other builders lack.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

func buildImage(im Image, created time.Time, annotations map[string]string) (v1.Image, error) {
	if im.Platform.OS == "" || im.Platform.Architecture == "" {
		return nil, fmt.Errorf("platform needs an OS and an architecture")
	}
	layerTar, err := layerTar(im.Files, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compressing layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	t := v1.Time{Time: created}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: t, CreatedBy: "ociimage", Comment: fmt.Sprintf("%d files", len(im.Files))},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = im.Platform.OS, im.Platform.Architecture, im.Platform.Variant
	cfg.Created = t
	cfg.Config.Entrypoint = im.Entrypoint
	cfg.Config.Env = im.Env
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	if len(annotations) > 0 {
		img = mutate.Annotations(img, annotations).(v1.Image)
	}
	return img, nil
}

// layerTar packs files as an uncompressed layer: sorted by path, parents
// first, every header fixed but for name, type, mode and size.
func layerTar(files []File, mtime time.Time) ([]byte, error) {
	entries := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(f.Path) || p == "/" {
			return nil, fmt.Errorf("file path %q: want an absolute path below /", f.Path)
		}
		if _, dup := entries[p]; dup {
			return nil, fmt.Errorf("file path %q given twice", f.Path)
		}
		if f.Mode.Type()&^fs.ModeDir != 0 {
			return nil, fmt.Errorf("%s: mode %v: only regular files and directories", p, f.Mode)
		}
		if f.Mode.IsDir() && (f.Data != nil || f.Source != "") {
			return nil, fmt.Errorf("%s: a directory has no contents", p)
		}
		if f.Source != "" {
			if f.Data != nil {
				return nil, fmt.Errorf("%s: both Data and Source", p)
			}
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return nil, err
			}
			f.Data = b
		}
		entries[p] = f
	}
	for p := range entries {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if e, ok := entries[d]; ok {
				if !e.Mode.IsDir() {
					return nil, fmt.Errorf("%s is a file and the parent of %s", d, p)
				}
				continue
			}
			entries[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		h := &tar.Header{
			Name:    strings.TrimPrefix(p, "/"),
			Mode:    tarMode(f.Mode),
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.Mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarMode is the tar header's mode of m: permission and the set-id and
// sticky bits at their Unix places (fs.FileMode keeps them elsewhere).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// Push uploads idx with its images and blobs to ref
// ("registry/repository:tag"), with the credentials `docker login`,
// `podman login` or `crane auth login` saved (authn.DefaultKeychain).
// localhost and 127.0.0.1 registries are spoken to over plain HTTP, all
// others over HTTPS.
func Push(ctx context.Context, ref string, idx v1.ImageIndex) error {
	r, err := name.ParseReference(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("pushing %s: %w", r, err)
	}
	return nil
}
