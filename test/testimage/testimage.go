// Package testimage builds images of this module's small Go programs for
// the node test, with internal/ociimage as `make image` builds bpfleet's: a
// static binary (CGO_ENABLED=0, -trimpath, no build id) as the image's one
// file and entrypoint, for this machine's architecture, since the node
// runs here.
package testimage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/bpfleet/bpfleet/internal/ociimage"
)

// PausePackage is the node test's sandbox process (the pod's pause).
const PausePackage = "github.com/bpfleet/bpfleet/test/node/pause"

// Program builds the main package pkg (an import path of this module, such
// as PausePackage; the go command runs in the caller's directory) and
// returns a one-platform index, linux/GOARCH, holding it at /NAME, NAME
// the last element of pkg, with entrypoint /NAME and args.
func Program(ctx context.Context, pkg string, args ...string) (v1.ImageIndex, error) {
	dir, err := os.MkdirTemp("", "testimage")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	name := path.Base(pkg)
	bin := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if p.Architecture == "arm64" {
		p.Variant = "v8"
	}
	return ociimage.Build(ociimage.Spec{Images: []ociimage.Image{{
		Platform:   p,
		Files:      []ociimage.File{{Path: "/" + name, Mode: 0o755, Source: bin}},
		Entrypoint: append([]string{"/" + name}, args...),
	}}})
}

// PushPause builds the pause image (entrypoint /pause) and pushes it to ref,
// such as "127.0.0.1:PORT/pause:3.10" on a test/registry, for containerd's
// sandbox image (its CRI's pinned_images.sandbox). It returns the index's
// digest.
func PushPause(ctx context.Context, ref string) (v1.Hash, error) {
	idx, err := Program(ctx, PausePackage)
	if err != nil {
		return v1.Hash{}, err
	}
	h, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	return h, ociimage.Push(ctx, ref, idx)
}
