package sysfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRead: whole files, as os.ReadFile reads them (one larger than the
// first buffer included), and os's errors for a missing file.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 4095, 4096, 4097, 100_000} {
		want := bytes.Repeat([]byte("x"), n)
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, want, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Read(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%d bytes: got %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v, want fs.ErrNotExist naming the path", err)
	}
	// A procfs file, generated as it is read, as os.ReadFile reads it.
	want, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("no procfs: %v", err)
	}
	if got, err := Read("/proc/self/mountinfo"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("/proc/self/mountinfo: %v\n%s\nwant\n%s", err, got, want)
	}
}

// TestReadUntil stops as soon as enough says so, and reads to the end when
// it never does.
func TestReadUntil(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	content := strings.Repeat("a line of text\n", 1000) // 15,000 bytes
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := 0
	got, err := ReadUntil(p, func(b []byte) bool { calls++; return len(b) >= 5000 })
	if err != nil || len(got) < 5000 || len(got) >= len(content) || !strings.HasPrefix(content, string(got)) {
		t.Errorf("stopped at %d bytes (%v), want a prefix of at least 5000 and less than %d", len(got), err, len(content))
	}
	got, err = ReadUntil(p, func([]byte) bool { return false })
	if err != nil || string(got) != content {
		t.Errorf("never enough: %d bytes (%v), want the whole %d", len(got), err, len(content))
	}
}

func TestInt(t *testing.T) {
	for in, want := range map[string]int{"0\n": 0, "1\n": 1, "12": 12, "": -1, "\n": -1, "x\n": -1, "-1\n": -1, "1 2\n": -1} {
		if got := Int([]byte(in)); got != want {
			t.Errorf("Int(%q) = %d, want %d", in, got, want)
		}
	}
}
