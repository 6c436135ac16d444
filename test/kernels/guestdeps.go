package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// guestDepsFile, in a test package's directory, names what its tests need
// in the guest besides the test binary, one directive a line:
//
//	deb PACKAGE...  Debian packages of the entry's own suite and
//	                architecture, unpacked into the guest's / (their
//	                documentation and locales left out)
//	build DIR       a main package (DIR relative to the test package, in
//	                a module of its own or not) built for the guest and
//	                put at /bin/<base name of DIR>
//
// Lines starting with # are comments.
const guestDepsFile = "guest-deps"

// guestDeps are the directives of every test package of a run.
type guestDeps struct {
	debs   []string
	builds []string // absolute directories
}

func readGuestDeps(root string, pkgs []string) (*guestDeps, error) {
	d := &guestDeps{}
	for _, pkg := range pkgs {
		dir := filepath.Join(root, pkg)
		b, err := os.ReadFile(filepath.Join(dir, guestDepsFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s's %s: %w", pkg, guestDepsFile, err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || strings.HasPrefix(f[0], "#") {
				continue
			}
			switch {
			case f[0] == "deb" && len(f) > 1:
				d.debs = append(d.debs, f[1:]...)
			case f[0] == "build" && len(f) == 2:
				d.builds = append(d.builds, filepath.Join(dir, f[1]))
			default:
				return nil, fmt.Errorf("%s's %s: cannot read %q (deb PACKAGE... or build DIR)", pkg, guestDepsFile, sc.Text())
			}
		}
	}
	return d, nil
}

// buildGuestBins builds each build directive's main package for goarch
// into dir and adds it to the initramfs. The go command runs in the
// package's directory, so a package in a module of its own builds with
// that module's requirements, not bpfleet's.
func buildGuestBins(r *initramfs, builds []string, dir, goarch string) error {
	for _, b := range builds {
		bin := filepath.Join(dir, filepath.Base(b))
		if err := goBuild(b, goarch, "build", "-trimpath", "-o", bin, "."); err != nil {
			return err
		}
		r.addFile("bin/"+filepath.Base(b), bin, 0o755)
	}
	return nil
}

// debFiles are the initramfs paths of one entry's packages, so that the
// next entry's replace them.
type debFiles map[string]bool

// addDebs fetches the packages for the entry (cached) and puts their files
// into the initramfs, replacing the previous entry's.
func addDebs(r *initramfs, prev debFiles, e Entry, names []string, logf func(string, ...any)) (debFiles, error) {
	for n := range prev {
		delete(r.files, n)
	}
	added := debFiles{}
	if len(names) == 0 {
		return added, nil
	}
	// Everything the packages add, the directories made for them
	// included, goes with them when the next entry replaces them: a
	// directory left behind (bookworm's /lib64) would stand where the
	// next suite's merged-/usr link must be.
	before := make(map[string]bool, len(r.files))
	for n := range r.files {
		before[n] = true
	}
	defer func() {
		for n := range r.files {
			if !before[n] {
				added[n] = true
			}
		}
	}()
	apt, err := newAptEnv(e.Suite, e.Arch)
	if err != nil {
		return added, err
	}
	if err := apt.update(); err != nil {
		return added, err
	}
	for _, name := range names {
		dir, err := fetchDeb(apt, e, name, logf)
		if err != nil {
			return added, err
		}
		err = filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			rel = filepath.ToSlash(rel)
			if skipDebPath(rel) {
				if de.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			switch {
			case de.IsDir():
				// Empty ones too: a profile's include of a directory
				// (bookworm's tunables/xdg-user-dirs.d) needs it.
				if rel != "." {
					r.dir(rel)
				}
				return nil
			case de.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				r.addSymlink(rel, target)
			case de.Type().IsRegular():
				st, err := de.Info()
				if err != nil {
					return err
				}
				r.addFile(rel, p, uint32(st.Mode().Perm()))
			default:
				return nil
			}
			added[rel] = true
			return nil
		})
		if err != nil {
			return added, fmt.Errorf("adding %s to the initramfs: %w", name, err)
		}
	}
	// Debian's packages ship their files under /usr and rely on the
	// merged-/usr links of base-files (the dynamic loader's path is
	// /lib64/ld-linux-x86-64.so.2 or /lib/ld-linux-aarch64.so.1).
	for _, l := range []string{"lib", "lib64", "sbin"} {
		if _, ok := r.files[l]; !ok && hasUnder(added, "usr/"+l) {
			r.addSymlink(l, "usr/"+l)
			added[l] = true
		}
	}
	return added, nil
}

func hasUnder(files debFiles, dir string) bool {
	for n := range files {
		if strings.HasPrefix(n, dir+"/") {
			return true
		}
	}
	return false
}

// skipDebPath leaves out what no test runs: documentation, manuals,
// translations, and glibc's character set converters.
func skipDebPath(rel string) bool {
	for _, p := range []string{"usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/lintian", "usr/share/bug"} {
		if rel == p {
			return true
		}
	}
	return path.Base(rel) == "gconv"
}

// fetchDeb returns the directory the package's files are unpacked in,
// downloading and unpacking the suite's current version only when it is
// not cached yet.
func fetchDeb(apt *aptEnv, e Entry, name string, logf func(string, ...any)) (string, error) {
	ver, ok := apt.version(name)
	if !ok {
		return "", fmt.Errorf("%s: no package %s in %s/%s", e.Name, name, e.Suite, e.Arch)
	}
	dir := filepath.Join(cacheDir(), "debs", e.Suite+"-"+e.Arch, name+"_"+ver)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	logf("%s: downloading %s %s", e.Name, name, ver)
	deb, tmp, err := apt.download(name, ver)
	defer os.RemoveAll(tmp)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("creating package dir: %w", err)
	}
	// Unpacked next to its final place and renamed, so an interrupted
	// unpack is never taken for a cached one.
	part := dir + ".part"
	os.RemoveAll(part)
	if out, err := exec.Command("dpkg-deb", "-x", deb, part).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpacking %s: %w: %s", deb, err, strings.TrimSpace(string(out)))
	}
	return dir, os.Rename(part, dir)
}
