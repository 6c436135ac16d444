package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the layout's index.json that name the image for importers:
// containerd (`ctr images import`) reads AnnotationImageName, skopeo's
// oci-archive:FILE:NAME the ref name.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// WriteLayout writes idx to w as an OCI image layout (image-spec
// image-layout.md) packed in a tar, the form that containerd's
// `ctr images import` and `skopeo copy oci-archive:FILE` read:
//
//	blobs/sha256/<hex>  every manifest, config and layer, named by digest
//	index.json          one descriptor: idx itself
//	oci-layout          {"imageLayoutVersion":"1.0.0"}
//
// Entries are sorted, owned by 0:0 with mtime the Unix epoch, so the same
// idx gives the same bytes. ref, if not empty, names the image
// ("registry/repository:tag"): in full as AnnotationImageName, its tag as
// AnnotationRefName.
func WriteLayout(w io.Writer, idx v1.ImageIndex, ref string) error {
	desc := v1.Descriptor{MediaType: types.OCIImageIndex}
	var err error
	if desc.Digest, err = idx.Digest(); err != nil {
		return err
	}
	if desc.Size, err = idx.Size(); err != nil {
		return err
	}
	if ref != "" {
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("image name %q: %w", ref, err)
		}
		// containerd names Docker Hub images docker.io/library/NAME.
		reg := tag.RegistryStr()
		if reg == name.DefaultRegistry {
			reg = "docker.io"
		}
		desc.Annotations = map[string]string{
			AnnotationImageName: reg + "/" + tag.RepositoryStr() + ":" + tag.TagStr(),
			AnnotationRefName:   tag.TagStr(),
		}
	}
	indexJSON, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}})
	if err != nil {
		return err
	}
	blobs, err := indexBlobs(idx)
	if err != nil {
		return err
	}
	digests := make([]v1.Hash, 0, len(blobs))
	for h := range blobs {
		digests = append(digests, h)
	}
	sort.Slice(digests, func(i, j int) bool { return digests[i].String() < digests[j].String() })

	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0).UTC()
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%s: %d bytes, its descriptor says %d", name, n, size)
		}
		return err
	}
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	for _, h := range digests {
		b := blobs[h]
		rc, err := b.open()
		if err != nil {
			return fmt.Errorf("blob %s: %w", h, err)
		}
		err = file("blobs/"+h.Algorithm+"/"+h.Hex, b.size, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", h, err)
		}
	}
	if err := file("index.json", int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := file("oci-layout", int64(len(layout)), bytes.NewReader(layout)); err != nil {
		return err
	}
	return tw.Close()
}

type blob struct {
	size int64
	open func() (io.ReadCloser, error)
}

// indexBlobs returns every blob of idx by digest: the index, and each
// image's manifest, config and layers (shared layers once).
func indexBlobs(idx v1.ImageIndex) (map[v1.Hash]blob, error) {
	blobs := map[v1.Hash]blob{}
	raw := func(h v1.Hash, b []byte) {
		blobs[h] = blob{size: int64(len(b)), open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
	}
	b, err := idx.RawManifest()
	if err != nil {
		return nil, err
	}
	h, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	raw(h, b)
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if !d.MediaType.IsImage() {
			return nil, fmt.Errorf("index entry %s is a %s, not an image", d.Digest, d.MediaType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		b, err := img.RawManifest()
		if err != nil {
			return nil, err
		}
		raw(d.Digest, b)
		if b, err = img.RawConfigFile(); err != nil {
			return nil, err
		}
		h, err := img.ConfigName()
		if err != nil {
			return nil, err
		}
		raw(h, b)
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		for _, l := range layers {
			h, err := l.Digest()
			if err != nil {
				return nil, err
			}
			size, err := l.Size()
			if err != nil {
				return nil, err
			}
			blobs[h] = blob{size: size, open: l.Compressed}
		}
	}
	return blobs, nil
}
