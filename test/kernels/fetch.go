package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

const debianKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// listsMaxAge is how long downloaded package lists count as current: a
// second run within it resolves from the cache without touching the network.
const listsMaxAge = 6 * time.Hour

// Kernel is a fetched kernel image, ready for qemu -kernel.
type Kernel struct {
	Package string // e.g. linux-binary-unsigned-7.2.13+deb14-amd64
	Version string // Debian version of Package
	Image   string // path of the bootable image
	Cached  bool   // true when nothing was downloaded
	// NetModules are the guest's NIC modules, in load order, as the
	// package ships them (compressed: the kernel decompresses them); set
	// only when networking was asked for (FetchKernel's net).
	NetModules []string
	abi        string // the kernel's ABI name, e.g. 7.2.13+deb14-amd64
}

// netModules are the modules, in load order (each depends on ones before
// it), that give a guest a virtio-net NIC: Debian builds them as modules,
// and the packages ship no modules.dep to read the order from. Newer
// kernels build the virtio core and its PCI transport in; bullseye's 5.10
// cloud kernel has them as modules too.
var netModules = []string{"virtio", "virtio_ring", "virtio_pci", "failover", "net_failover", "virtio_net"}

// netModulesList names, in the kernel's cache directory, the file listing
// the fetched NIC modules in load order, after a first line naming the
// modules that were looked for. It is written last, so a directory without
// it (an interrupted fetch), or whose first line is not today's
// netModules, has its modules fetched again.
const netModulesList = "net/modules"

// cacheDir is where everything downloaded is kept between runs.
func cacheDir() string {
	if d := os.Getenv("BPFLEET_CACHE"); d != "" {
		return filepath.Join(d, "kernels")
	}
	return "/var/cache/bpfleet/kernels"
}

// aptEnv is a private apt configuration for one suite and architecture: its
// own sources, lists, cache and an empty dpkg status, so the host's apt state
// is neither read nor changed.
type aptEnv struct {
	dir  string
	conf string
}

func newAptEnv(suite, arch string) (*aptEnv, error) {
	dir := filepath.Join(cacheDir(), "apt", suite+"-"+arch)
	for _, d := range []string{"lists/partial", "cache/archives/partial", "etc/apt.conf.d", "etc/preferences.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("creating apt dir: %w", err)
		}
	}
	mirror, security, err := hostMirrors()
	if err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("[arch=%s signed-by=%s]", arch, debianKeyring)
	var src strings.Builder
	fmt.Fprintf(&src, "deb %s %s %s main\n", opts, mirror, suite)
	if suite != "sid" && suite != "unstable" {
		fmt.Fprintf(&src, "deb %s %s %s-updates main\n", opts, mirror, suite)
		if security != "" {
			fmt.Fprintf(&src, "deb %s %s %s-security main\n", opts, security, suite)
		}
	}
	files := map[string]string{
		"sources.list": src.String(),
		"status":       "",
		// APT_CONFIG is read before apt.conf.d, so pointing the parts and
		// main config at private paths keeps the host's settings (DEP-11
		// downloads, proxies for other repositories) out. Valid-Until is
		// not checked because mirrors that serve a frozen snapshot (as CI's
		// does) carry expired Release dates; signatures are still verified.
		"apt.conf": fmt.Sprintf(`Dir::Etc::main "%[1]s/etc/apt.conf";
Dir::Etc::parts "%[1]s/etc/apt.conf.d";
Dir::Etc::preferencesparts "%[1]s/etc/preferences.d";
Dir::Etc::sourcelist "%[1]s/sources.list";
Dir::Etc::sourceparts "-";
Dir::State::Lists "%[1]s/lists";
Dir::State::status "%[1]s/status";
Dir::Cache "%[1]s/cache";
APT::Architecture "%[2]s";
APT::Architectures { "%[2]s"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::Check-Valid-Until "false";
`, dir, arch),
	}
	for name, content := range files {
		// Rewriting an unchanged file would make apt rebuild its package
		// cache (seconds) on every run.
		if old, err := os.ReadFile(filepath.Join(dir, name)); err == nil && string(old) == content {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("writing apt %s: %w", name, err)
		}
	}
	return &aptEnv{dir: dir, conf: filepath.Join(dir, "apt.conf")}, nil
}

func (a *aptEnv) run(cwd string, args ...string) ([]byte, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "APT_CONFIG="+a.conf, "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// update refreshes the private package lists unless they are recent.
func (a *aptEnv) update() error {
	stamp := filepath.Join(a.dir, "updated")
	if st, err := os.Stat(stamp); err == nil && time.Since(st.ModTime()) < listsMaxAge {
		return nil
	}
	if _, err := a.run(a.dir, "apt-get", "-q", "update"); err != nil {
		return fmt.Errorf("updating package lists: %w", err)
	}
	return os.WriteFile(stamp, nil, 0o644)
}

var dependsRe = regexp.MustCompile(`(?m)^\s*Depends: (linux-image-\S+)$`)

// resolve finds the unsigned kernel package version metaVer of the
// metapackage points to: it depends on linux-image-<abi>; its unsigned
// image is linux-binary-unsigned-<abi> (sid, trixie-backports era) or
// linux-image-<abi>-unsigned (bookworm, trixie).
func (a *aptEnv) resolve(meta, metaVer string) (pkg, version, abi string, err error) {
	out, err := a.run(a.dir, "apt-cache", "depends", meta+"="+metaVer)
	if err != nil {
		return "", "", "", fmt.Errorf("resolving %s %s: %w", meta, metaVer, err)
	}
	m := dependsRe.FindSubmatch(out)
	if m == nil {
		return "", "", "", fmt.Errorf("resolving %s %s: no linux-image dependency in %q", meta, metaVer, out)
	}
	abi = strings.TrimPrefix(string(m[1]), "linux-image-")
	for _, cand := range []string{"linux-binary-unsigned-" + abi, "linux-image-" + abi + "-unsigned"} {
		vs := a.versions(cand)
		if len(vs) == 0 {
			continue
		}
		// The image built from the same source upload as the
		// metapackage, else the newest build of that ABI.
		v := vs[0]
		for _, x := range vs {
			if x == metaVer {
				v = x
			}
		}
		return cand, v, abi, nil
	}
	return "", "", "", fmt.Errorf("resolving %s %s: no unsigned image package for ABI %s", meta, metaVer, abi)
}

// versions lists every version of pkg the package lists hold, in apt's
// order of preference (newest first), none when apt knows no such package.
func (a *aptEnv) versions(pkg string) []string {
	out, err := a.run(a.dir, "apt-cache", "madison", pkg)
	if err != nil {
		return nil
	}
	var vs []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "|")
		if len(f) < 3 || strings.TrimSpace(f[0]) != pkg {
			continue
		}
		if v := strings.TrimSpace(f[1]); !seen[v] {
			seen[v] = true
			vs = append(vs, v)
		}
	}
	return vs
}

// version is the candidate version of pkg, false when apt knows no such
// package.
func (a *aptEnv) version(pkg string) (string, bool) {
	out, err := a.run(a.dir, "apt-cache", "show", "--no-all-versions", pkg)
	if err != nil {
		return "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
			return v, true
		}
	}
	return "", false
}

// download fetches pkg=version into a fresh temporary directory and
// returns the .deb; the caller removes the directory.
func (a *aptEnv) download(pkg, version string) (deb, tmp string, err error) {
	tmp, err = os.MkdirTemp(filepath.Join(cacheDir(), "apt"), "download-")
	if err != nil {
		return "", "", fmt.Errorf("creating download dir: %w", err)
	}
	if _, err := a.run(tmp, "apt-get", "-q", "download", pkg+"="+version); err != nil {
		err = fmt.Errorf("downloading %s: %w", pkg, err)
		if strings.Contains(err.Error(), " 404 ") {
			err = &notServedError{pkg: pkg, version: version, err: err}
		}
		return "", tmp, err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", tmp, fmt.Errorf("downloading %s: expected one .deb, found %d", pkg, len(debs))
	}
	return debs[0], tmp, nil
}

// FetchKernel resolves the entry's newest kernel and returns its image,
// downloading and extracting it only when it is not cached yet. With net,
// it also returns the guest's NIC modules (Kernel.NetModules), fetched the
// same way.
//
// A kernel the mirror lists but does not serve (HTTP 404: bullseye's LTS
// kernels are in bullseye-security only, whose pool some mirrors do not
// carry while their lists are reachable) gives way to the metapackage's
// next older version, said in the log; any other download error fails.
func FetchKernel(e Entry, net bool, logf func(string, ...any)) (*Kernel, error) {
	apt, err := newAptEnv(e.Suite, e.Arch)
	if err != nil {
		return nil, err
	}
	if err := apt.update(); err != nil {
		return nil, err
	}
	metaVers := apt.versions(e.Meta)
	if len(metaVers) == 0 {
		return nil, fmt.Errorf("resolving %s: no such package in %s/%s", e.Meta, e.Suite, e.Arch)
	}
	var unserved []string
	for _, mv := range metaVers {
		k, err := fetchKernelAt(apt, e, mv, net, logf)
		if err == nil {
			if len(unserved) > 0 {
				logf("%s: using %s %s: the mirror does not serve %s", e.Name, k.Package, k.Version, strings.Join(unserved, ", "))
			}
			return k, nil
		}
		var nf *notServedError
		if !errors.As(err, &nf) {
			return nil, err
		}
		logf("%s: %v; trying %s's next older version", e.Name, err, e.Meta)
		unserved = append(unserved, nf.pkg+" "+nf.version)
	}
	return nil, fmt.Errorf("no version of %s has a kernel the mirror serves (not served: %s)", e.Meta, strings.Join(unserved, ", "))
}

// notServedError is a download the mirror answered with 404: the package
// is listed but its file is not there.
type notServedError struct {
	pkg, version string
	err          error
}

func (e *notServedError) Error() string { return e.err.Error() }
func (e *notServedError) Unwrap() error { return e.err }

// fetchKernelAt is FetchKernel for version metaVer of the metapackage.
func fetchKernelAt(apt *aptEnv, e Entry, metaVer string, net bool, logf func(string, ...any)) (*Kernel, error) {
	pkg, ver, abi, err := apt.resolve(e.Meta, metaVer)
	if err != nil {
		return nil, err
	}
	k := &Kernel{Package: pkg, Version: ver, abi: abi}
	dir := filepath.Join(cacheDir(), e.Name, pkg+"_"+ver)
	k.Image = filepath.Join(dir, "vmlinuz")
	if _, err := os.Stat(k.Image); err == nil {
		k.Cached = true
	} else if err := fetchImage(apt, e, k, dir, logf); err != nil {
		return nil, err
	}
	if net {
		if k.NetModules, err = fetchNetModules(apt, e, k, dir, logf); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func fetchImage(apt *aptEnv, e Entry, k *Kernel, dir string, logf func(string, ...any)) error {
	logf("%s: downloading %s %s", e.Name, k.Package, k.Version)
	deb, tmp, err := apt.download(k.Package, k.Version)
	defer os.RemoveAll(tmp)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating kernel dir: %w", err)
	}
	if err := extractImage(deb, k.Image+".tmp", e.Arch); err != nil {
		return fmt.Errorf("extracting kernel from %s: %w", deb, err)
	}
	return os.Rename(k.Image+".tmp", k.Image)
}

// fetchNetModules returns the cached NIC modules of the kernel, extracting
// them first from the package that ships the kernel's modules: its own
// linux-modules-<abi> where Debian splits them out (sid), else the image
// package itself (bookworm, trixie). A module the package lacks is built
// into the kernel (vminit finds no eth0 if it is not).
func fetchNetModules(apt *aptEnv, e Entry, k *Kernel, dir string, logf func(string, ...any)) ([]string, error) {
	list := filepath.Join(dir, netModulesList)
	wanted := "wanted " + strings.Join(netModules, " ")
	if b, err := os.ReadFile(list); err == nil {
		if first, rest, _ := strings.Cut(string(b), "\n"); first == wanted {
			var paths []string
			for _, name := range strings.Fields(rest) {
				paths = append(paths, filepath.Join(dir, "net", name))
			}
			return paths, nil
		}
	}
	pkg, ver := "linux-modules-"+k.abi, ""
	if v, ok := apt.version(pkg); ok {
		ver = v
	} else {
		pkg, ver = k.Package, k.Version
	}
	logf("%s: downloading %s %s for the guest's NIC modules", e.Name, pkg, ver)
	deb, tmp, err := apt.download(pkg, ver)
	defer os.RemoveAll(tmp)
	if err != nil {
		return nil, err
	}
	netDir := filepath.Join(dir, "net")
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating modules dir: %w", err)
	}
	found, err := extractModules(deb, netDir, netModules)
	if err != nil {
		return nil, fmt.Errorf("extracting NIC modules from %s: %w", deb, err)
	}
	var names, paths []string
	for _, m := range netModules {
		if f, ok := found[m]; ok {
			names = append(names, f)
			paths = append(paths, filepath.Join(netDir, f))
		}
	}
	if err := os.WriteFile(list+".tmp", []byte(wanted+"\n"+strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	return paths, os.Rename(list+".tmp", list)
}

// extractModules copies the named modules (name.ko, possibly compressed:
// .ko.xz, .ko.zst, .ko.gz) out of a .deb into dir as they are, and returns
// the file name each was written under.
func extractModules(deb, dir string, names []string) (map[string]string, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	found := map[string]string{}
	err := walkDeb(deb, func(h *tar.Header, r io.Reader) (bool, error) {
		base := filepath.Base(h.Name)
		name, _, ok := strings.Cut(base, ".ko")
		if !ok || !want[name] || found[name] != "" {
			return false, nil
		}
		if err := writeFile(filepath.Join(dir, base), r); err != nil {
			return false, err
		}
		found[name] = base
		return len(found) == len(want), nil
	})
	return found, err
}

// walkDeb calls f with each regular file of a .deb's data until f says it
// is done or the archive ends.
func walkDeb(deb string, f func(*tar.Header, io.Reader) (done bool, err error)) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running dpkg-deb: %w", err)
	}
	defer func() {
		io.Copy(io.Discard, stdout) // let dpkg-deb finish cleanly
		cmd.Wait()
	}()
	tr := tar.NewReader(stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading package data (dpkg-deb: %s): %w", strings.TrimSpace(stderr.String()), err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if done, err := f(h, tr); done || err != nil {
			return err
		}
	}
}

func writeFile(dst string, r io.Reader) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return f.Close()
}

// extractImage copies the kernel image out of a .deb. On arm64 Debian ships
// vmlinuz as a gzip'd Image, which qemu's -kernel takes as it is on recent
// versions but not on all: store it uncompressed so every qemu boots it.
func extractImage(deb, dst, arch string) error {
	written := false
	err := walkDeb(deb, func(h *tar.Header, r io.Reader) (bool, error) {
		if !strings.HasPrefix(filepath.Base(h.Name), "vmlinuz") {
			return false, nil
		}
		br := bufio.NewReader(r)
		r = br
		if magic, _ := br.Peek(2); arch == "arm64" && bytes.Equal(magic, []byte{0x1f, 0x8b}) {
			zr, err := gzip.NewReader(br)
			if err != nil {
				return false, fmt.Errorf("decompressing %s: %w", h.Name, err)
			}
			r = zr
		}
		written = true
		return true, writeFile(dst, r)
	})
	if err == nil && !written {
		return errors.New("no vmlinuz in package")
	}
	return err
}

// hostMirrors returns the Debian archive and security mirrors this
// machine's own apt is configured with (deb822 .sources files and
// sources.list), so the kernels come from wherever the host's packages do.
func hostMirrors() (archive, security string, err error) {
	var uris []string
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "URIs:"); ok {
				uris = append(uris, strings.Fields(v)...)
			}
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, lists...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 3 || fs[0] != "deb" {
				continue
			}
			i := 1
			if strings.HasPrefix(fs[i], "[") { // options: [arch=... signed-by=...]
				for i < len(fs) && !strings.HasSuffix(fs[i], "]") {
					i++
				}
				i++
			}
			if i < len(fs) {
				uris = append(uris, fs[i])
			}
		}
	}
	for _, u := range uris {
		u = strings.TrimSuffix(u, "/")
		switch {
		case strings.HasSuffix(u, "/debian-security") && security == "":
			security = u
		case strings.HasSuffix(u, "/debian") && archive == "":
			archive = u
		}
	}
	if archive == "" {
		return "", "", errors.New("no Debian archive (a URI ending in /debian) in this machine's apt sources: the kernels are fetched from the mirror apt already uses")
	}
	return archive, security, nil
}
