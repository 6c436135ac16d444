package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCapEff(t *testing.T) {
	for _, c := range []struct {
		status string
		want   uint64
		ok     bool
	}{
		{"Name:\tbpfleet\nCapInh:\t0000000000000000\nCapEff:\t000000c000280004\nCapBnd:\t000000c000280004\n", 0xc000280004, true},
		{"CapEff:\t000001ffffffffff\n", 0x1ffffffffff, true},
		{"CapEff:\tzz\n", 0, false},
		{"Name:\tx\n", 0, false},
	} {
		got, ok := capEff(c.status)
		if got != c.want || ok != c.ok {
			t.Errorf("capEff(%q) = %#x, %v; want %#x, %v", c.status, got, ok, c.want, c.ok)
		}
	}
}

// degradedLine is the snapshot's Degraded line of feature, "" when none.
func degradedLine(s *Snapshot, feature string) string {
	for _, d := range s.Degraded {
		if strings.HasPrefix(d, feature+": ") {
			return d
		}
	}
	return ""
}

// TestCoreCacheUnwritable: a CO-RE cache directory that cannot be made (its
// parent is a regular file, which stops root too) leaves the iterators
// loaded, and says so in one Degraded line that names the directory and
// what to do. A writable one says nothing.
func TestCoreCacheUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "cache")
	s := scan(t, newTestAgentWith(t, Config{CacheDir: dir, Maps: true}))
	if s.Scan.Source != ScanSourceIterator {
		t.Skipf("no iterator scan source here (%s): no CO-RE cache to write", s.Scan.FallbackReason)
	}
	d := degradedLine(s, FeatureCoreCache)
	t.Logf("degraded: %s", d)
	if d == "" || !strings.Contains(d, dir) || !strings.Contains(d, "BPFLEET_CACHE_DIR") || strings.Contains(d, "\n") {
		t.Errorf("unwritable CO-RE cache %s: Degraded %q, want one line naming it and BPFLEET_CACHE_DIR", dir, s.Degraded)
	}
	ok := scan(t, newTestAgentWith(t, Config{CacheDir: t.TempDir(), Maps: true}))
	if d := degradedLine(ok, FeatureCoreCache); d != "" {
		t.Errorf("writable CO-RE cache: %s", d)
	}
}
