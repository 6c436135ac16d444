package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// cpioFile is one member of an initramfs.
type cpioFile struct {
	mode    uint32 // full st_mode: type and permission bits
	data    []byte // regular files: content; symlinks: target
	src     string // regular files: read from here when data is nil
	rdevMaj uint32
	rdevMin uint32
}

const (
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFCHR = 0o020000
	sIFLNK = 0o120000
)

// initramfs collects files and writes them as an uncompressed newc cpio
// archive, which every kernel accepts as initramfs. Written here rather than
// with cpio(1) so device nodes need no root and the order is deterministic.
type initramfs struct {
	files map[string]cpioFile
	// debs are the Debian packages the tests asked for (guest-deps);
	// debFiles the files of the current entry's, replaced per entry.
	debs     []string
	debFiles debFiles
}

func newInitramfs() *initramfs {
	r := &initramfs{files: map[string]cpioFile{}}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "bin", "tests", "bpfleet"} {
		r.dir(d)
	}
	// The kernel opens /dev/console for init's stdio before devtmpfs exists.
	r.files["dev/console"] = cpioFile{mode: sIFCHR | 0o600, rdevMaj: 5, rdevMin: 1}
	return r
}

func (r *initramfs) dir(p string) {
	p = strings.Trim(p, "/")
	for p != "." && p != "" {
		r.files[p] = cpioFile{mode: sIFDIR | 0o755}
		p = path.Dir(p)
	}
}

func (r *initramfs) addFile(dst, src string, perm uint32) {
	dst = strings.Trim(dst, "/")
	r.dir(path.Dir(dst))
	r.files[dst] = cpioFile{mode: sIFREG | perm, src: src}
}

func (r *initramfs) addData(dst string, data []byte, perm uint32) {
	dst = strings.Trim(dst, "/")
	r.dir(path.Dir(dst))
	r.files[dst] = cpioFile{mode: sIFREG | perm, data: data}
}

// addSymlink adds dst pointing at target, as a Debian package ships it.
func (r *initramfs) addSymlink(dst, target string) {
	dst = strings.Trim(dst, "/")
	r.dir(path.Dir(dst))
	r.files[dst] = cpioFile{mode: sIFLNK | 0o777, data: []byte(target)}
}

// removeUnder drops dir's contents (the directory stays).
func (r *initramfs) removeUnder(dir string) {
	prefix := strings.Trim(dir, "/") + "/"
	for n := range r.files {
		if strings.HasPrefix(n, prefix) {
			delete(r.files, n)
		}
	}
}

func (r *initramfs) writeFile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("creating initramfs: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := r.write(w); err != nil {
		f.Close()
		return fmt.Errorf("writing initramfs %s: %w", name, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *initramfs) write(w io.Writer) error {
	names := make([]string, 0, len(r.files))
	for n := range r.files {
		names = append(names, n)
	}
	sort.Strings(names) // parents before children
	ino := uint32(1)
	for _, n := range names {
		f := r.files[n]
		data := f.data
		if f.mode&0o170000 == sIFREG && data == nil && f.src != "" {
			b, err := os.ReadFile(f.src)
			if err != nil {
				return err
			}
			data = b
		}
		if err := writeCpioEntry(w, n, ino, f, data); err != nil {
			return err
		}
		ino++
	}
	return writeCpioEntry(w, "TRAILER!!!", 0, cpioFile{}, nil)
}

func writeCpioEntry(w io.Writer, name string, ino uint32, f cpioFile, data []byte) error {
	nlink := uint32(1)
	if f.mode&0o170000 == sIFDIR {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, f.mode, 0, 0, nlink, 0, len(data), 0, 0, f.rdevMaj, f.rdevMin, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	if err := pad(w, len(hdr)+len(name)+1); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return pad(w, len(data))
}

func pad(w io.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
