package bpfsys

import (
	"bytes"
	"testing"
)

// TestParseFDInfo: the owner walk's read of another process's fdinfo.
func TestParseFDInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want FDInfo
	}{
		{"prog", "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2091\nprog_type:\t1\nprog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t17\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t0\nverified_insns:\t2\n", FDInfo{ProgID: 17}},
		{"link", "pos:\t0\nflags:\t02000000\nmnt_id:\t15\nino:\t2091\nlink_type:\traw_tracepoint\nlink_id:\t3\nprog_tag:\t3b185187f1855c4c\nprog_id:\t42\ntp_name:\tsys_enter\n", FDInfo{ProgID: 42, LinkID: 3}},
		{"map has neither", "pos:\t0\nflags:\t02000002\nmap_type:\t2\nmap_id:\t9\nfrozen:\t0\n", FDInfo{}},
		{"no trailing newline", "prog_id:\t4294967295", FDInfo{ProgID: 4294967295}},
		{"overflow ignored", "prog_id:\t4294967296\n", FDInfo{}},
		{"garbage value ignored", "prog_id:\t12x\nlink_id:\t\n", FDInfo{}},
		{"crlf and spaces", "prog_id:  7 \r\n", FDInfo{ProgID: 7}},
		{"key must start the line", "xprog_id:\t5\n  prog_id:\t6\n", FDInfo{}},
		{"unknown lines around", "future_field:\tabc\nprog_id:\t8\nlink_id:\t9\nanother:\t1\n", FDInfo{ProgID: 8, LinkID: 9}},
		{"empty", "", FDInfo{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseFDInfo([]byte(tc.in)); got != tc.want {
				t.Errorf("ParseFDInfo = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzParseFDInfo: no input makes an id out of nothing.
func FuzzParseFDInfo(f *testing.F) {
	f.Add([]byte("pos:\t0\nflags:\t02000002\nprog_type:\t1\nprog_id:\t17\nrun_cnt:\t0\n"))
	f.Add([]byte("link_type:\traw_tracepoint\nlink_id:\t3\nprog_id:\t42\n"))
	f.Add([]byte("prog_id:\t99999999999999999999999\n"))
	f.Add([]byte("prog_id:"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		fi := ParseFDInfo(b)
		if fi.ProgID != 0 && !bytes.Contains(b, []byte("prog_id:")) {
			t.Errorf("prog id %d from input without prog_id:", fi.ProgID)
		}
		if fi.LinkID != 0 && !bytes.Contains(b, []byte("link_id:")) {
			t.Errorf("link id %d from input without link_id:", fi.LinkID)
		}
	})
}
