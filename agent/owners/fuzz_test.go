package owners

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func addCgroupFixtures(f *testing.F, asPaths bool) {
	files, _ := filepath.Glob(filepath.Join("testdata", "proc-cgroup", "*.txt"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		if !asPaths {
			f.Add(string(b))
			continue
		}
		for _, l := range ParseProcCgroup(b) {
			f.Add(l.Path)
		}
	}
}

func FuzzParseCgroupPath(f *testing.F) {
	addCgroupFixtures(f, true)
	f.Add("/kubepods/burstable/pod" + pod1 + "/" + id1)
	f.Add("/kubepods.slice/kubepods-pod_.slice/crio-.scope")
	f.Add("//kubepods//pod/")
	f.Fuzz(func(t *testing.T, p string) {
		c := ParseCgroupPath(p)
		if c.ID != "" {
			if !isHex64(c.ID) {
				t.Errorf("container id %q is not 64 hex", c.ID)
			}
			if !strings.Contains(p, c.ID) {
				t.Errorf("container id %q not in path", c.ID)
			}
		}
		if c.Runtime != "" && c.ID == "" {
			t.Errorf("runtime %q without a container id", c.Runtime)
		}
		if c.PodUID != "" {
			if _, ok := podUID(c.PodUID, false); !ok {
				t.Errorf("pod uid %q is malformed", c.PodUID)
			}
			if !strings.Contains(p, c.PodUID) && !strings.Contains(p, strings.ReplaceAll(c.PodUID, "-", "_")) {
				t.Errorf("pod uid %q not in path", c.PodUID)
			}
			if c.QoS == "" {
				t.Errorf("pod without QoS class")
			}
		}
	})
}

func FuzzParseProcCgroup(f *testing.F) {
	addCgroupFixtures(f, false)
	f.Add("0::/\n")
	f.Add("::\n:::\n1:\n")
	f.Fuzz(func(t *testing.T, s string) {
		lines := ParseProcCgroup([]byte(s))
		for _, l := range lines {
			if strings.Contains(l.Path, "\n") || strings.Contains(l.Controllers, ":") {
				t.Errorf("bad line %+v", l)
			}
		}
		c, p := ContainerOf(lines)
		if c.ID != "" && !strings.Contains(s, c.ID) {
			t.Errorf("container id %q not in input", c.ID)
		}
		if len(lines) > 0 && !strings.Contains(s, p) {
			t.Errorf("path %q not in input", p)
		}
	})
}

func FuzzParseXDP(f *testing.F) {
	f.Add([]byte{5, 0, 2, 0, 1, 0, 0, 0, 8, 0, 4, 0, 7, 0, 0, 0})
	f.Add([]byte{5, 0, 2, 0, 4, 0, 0, 0, 8, 0, 5, 0, 7, 0, 0, 0, 8, 0, 6, 0, 9, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, a := range parseXDP(b, Netdev{Index: 1, Name: "x"}) {
			if a.ProgID == 0 || a.AttachType != "xdp" {
				t.Errorf("bad attachment %+v", a)
			}
		}
	})
}
