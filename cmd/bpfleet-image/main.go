// Command bpfleet-image packs the static binaries of `make build`, per
// platform, into bpfleet's OCI image (`make image`): /bpfleet (the
// entrypoint), /bpfleet-agent beside it, which `bpfleet agent` execs, and an
// empty /tmp; no shell, no libc. It writes a multi-platform index as an OCI
// image layout tar and, with -push, pushes it to a registry. It reads only
// the binaries and its flags (the Makefile takes revision, version and time
// from git), so the same binaries and flags give the same digest.
package main

import (
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/bpfleet/bpfleet/internal/ociimage"
)

// binaries are the files of each platform's directory, at /NAME in the image.
var binaries = []string{"bpfleet", "bpfleet-agent"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bpfleet-image:", err)
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

type platformDir struct {
	platform v1.Platform
	dir      string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("bpfleet-image", flag.ContinueOnError)
	fl.SetOutput(stderr)
	out := fl.String("o", "bin/bpfleet-image.tar", "the OCI image layout tar to write")
	name := fl.String("name", "", "image name recorded in the tar for importers such as ctr images import (registry/repository:tag)")
	push := fl.String("push", "", "also push the index to this reference (registry/repository:tag)")
	source := fl.String("source", "https://github.com/bpfleet/bpfleet", "org.opencontainers.image.source annotation")
	revision := fl.String("revision", "", "git commit of the binaries (org.opencontainers.image.revision)")
	version := fl.String("version", "", "version of the binaries, git describe (org.opencontainers.image.version)")
	createdFlag := fl.String("created", "", "commit time, RFC 3339: every file's mtime, the config's created time and org.opencontainers.image.created")
	var platforms []platformDir
	fl.Func("platform", "OS/ARCH[/VARIANT]=DIR: that platform's binaries bpfleet and bpfleet-agent lie in DIR (once per platform)", func(s string) error {
		spec, dir, ok := strings.Cut(s, "=")
		if !ok || dir == "" {
			return fmt.Errorf("%q: want OS/ARCH[/VARIANT]=DIR", s)
		}
		p, err := v1.ParsePlatform(spec)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return fmt.Errorf("%q: want OS/ARCH[/VARIANT]=DIR", s)
		}
		platforms = append(platforms, platformDir{*p, dir})
		return nil
	})
	if err := fl.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case fl.NArg() > 0:
		return usageError{fmt.Errorf("unexpected arguments %q", fl.Args())}
	case len(platforms) == 0:
		return usageError{errors.New("no -platform given")}
	case *revision == "" || *version == "" || *createdFlag == "":
		return usageError{errors.New("-revision, -version and -created are required (make image passes them from git)")}
	}
	created, err := time.Parse(time.RFC3339, *createdFlag)
	if err != nil {
		return usageError{fmt.Errorf("-created: %w", err)}
	}
	created = created.UTC()

	spec := ociimage.Spec{
		Created: created,
		Annotations: map[string]string{
			"org.opencontainers.image.source":   *source,
			"org.opencontainers.image.revision": *revision,
			"org.opencontainers.image.version":  *version,
			"org.opencontainers.image.created":  created.Format(time.RFC3339),
		},
	}
	for _, pd := range platforms {
		im := ociimage.Image{
			Platform: pd.platform,
			Files:    []ociimage.File{{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}},
			// `bpfleet agent` finds bpfleet-agent through its own path, not
			// PATH; PATH=/ lets `kubectl exec ... -- bpfleet list` find it.
			Entrypoint: []string{"/bpfleet"},
			Env:        []string{"PATH=/"},
		}
		for _, b := range binaries {
			src := filepath.Join(pd.dir, b)
			if err := checkBinary(src, pd.platform); err != nil {
				return err
			}
			im.Files = append(im.Files, ociimage.File{Path: "/" + b, Mode: 0o755, Source: src})
		}
		spec.Images = append(spec.Images, im)
	}
	idx, err := ociimage.Build(spec)
	if err != nil {
		return err
	}
	if err := writeLayout(*out, idx, *name); err != nil {
		return err
	}
	h, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: index %s\n", *out, h)
	if err := printPlatforms(stdout, idx); err != nil {
		return err
	}
	if *push != "" {
		if err := ociimage.Push(ctx, *push, idx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pushed %s (%s)\n", *push, h)
	}
	return nil
}

// elfMachines are the ELF machines of Go's linux architectures.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "loong64": elf.EM_LOONGARCH,
}

// checkBinary refuses what could not run in the image: a binary of another
// architecture, or one that needs a dynamic loader and libc (CGO_ENABLED=1),
// which the image does not have ("no such file or directory" at start).
func checkBinary(path string, p v1.Platform) error {
	want, ok := elfMachines[p.Architecture]
	if p.OS != "linux" || !ok {
		return fmt.Errorf("platform %s: only linux on %s", p.String(), strings.Join(slices.Sorted(maps.Keys(elfMachines)), ", "))
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (make image builds it)", path, err)
	}
	defer f.Close()
	if f.Machine != want {
		return fmt.Errorf("%s is a %s binary, not %s: build it with GOARCH=%s", path, f.Machine, p.String(), p.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked and the image has no libc: build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// writeLayout writes the tar next to out and renames it into place, so that
// a failed build leaves no half-written image.
func writeLayout(out string, idx v1.ImageIndex, name string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := ociimage.WriteLayout(tmp, idx, name); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// printPlatforms prints each platform's manifest digest and layer size,
// compressed (what a node pulls) and as files.
func printPlatforms(w io.Writer, idx v1.ImageIndex) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		var compressed, files int64
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return err
			}
			compressed += n
			rc, err := l.Uncompressed()
			if err != nil {
				return err
			}
			u, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return err
			}
			files += u
		}
		fmt.Fprintf(w, "  %-14s %s  layer %.1f MB gzip, %.1f MB tar\n", d.Platform.String(), d.Digest, float64(compressed)/1e6, float64(files)/1e6)
	}
	return nil
}
