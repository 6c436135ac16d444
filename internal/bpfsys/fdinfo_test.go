package bpfsys

import (
	"os"
	"testing"
)

func TestField(t *testing.T) {
	entry := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2087\nmap_type:\t1\nkey_size:\t4\nmemlock:\t1088\nmap_id:\t42\nfrozen:\t0\n")
	for _, tc := range []struct {
		key  string
		want uint64
		ok   bool
	}{
		{"memlock:", 1088, true},
		{"map_id:", 42, true},
		{"frozen:", 0, true},
		{"prog_id:", 0, false},
		{"flags:", 2000002, true}, // octal in the kernel's text; no caller reads it
	} {
		got, ok := Field(entry, tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Field(%q) = %d, %v; want %d, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
	// A program's entry, its last line without a newline.
	prog := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t1\nprog_jited:\t1\nprog_tag:\tabc\nprog_id:\t42\nmemlock:\t4096")
	if v, ok := Field(prog, "memlock:"); !ok || v != 4096 {
		t.Errorf("memlock (last line, no newline) = %d %v", v, ok)
	}
	if _, ok := Field([]byte("memlock:\tlots\n"), "memlock:"); ok {
		t.Error("a value that is not a number was read")
	}
}

// TestRead reads a real entry: the pos: line of a file read to offset 3.
func TestRead(t *testing.T) {
	d := NewFdinfoDir()
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	var buf [512]byte
	b, err := d.Read(int(f.Fd()), buf[:])
	if err != nil {
		t.Fatal(err)
	}
	if pos, ok := Field(b, "pos:"); !ok || pos != 3 {
		t.Fatalf("pos: %d, %v in %q", pos, ok, b)
	}
	if _, err := d.Read(1<<20, buf[:]); err == nil {
		t.Error("an fd that is not open was read")
	}
}
