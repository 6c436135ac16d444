package bpfsys

import "testing"

func TestFdinfoField(t *testing.T) {
	b := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nlink_type:\traw_tracepoint\nlink_id:\t5\nprog_tag:\tabc\nprog_id:\t42\nmemlock:\t4096")
	if v, ok := FdinfoField(b, "prog_id:"); !ok || v != 42 {
		t.Errorf("prog_id = %d %v", v, ok)
	}
	if v, ok := FdinfoField(b, "memlock:"); !ok || v != 4096 {
		t.Errorf("memlock (last line, no newline) = %d %v", v, ok)
	}
	if _, ok := FdinfoField(b, "missing:"); ok {
		t.Error("found a missing key")
	}
}
