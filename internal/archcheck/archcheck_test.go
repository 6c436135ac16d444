package archcheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/bpfleet/bpfleet/"

// maxLines is the project's limit for a product Go file (not a test, not
// under test/, not generated).
const maxLines = 600

// pkg is what the checks need of one package: its path inside the module and
// the module's packages its product files import.
type pkg struct {
	Path    string
	Imports []string
}

// rule forbids the packages under From (a path or a folder of paths), but
// those under Besides, to import any path under one of Never, unless the
// import is under one of Except. Only, where set, is the whole list of what
// they may import.
type rule struct {
	From    string
	Besides []string
	Never   []string
	Except  []string
	Only    []string
	Why     string
}

// rules are ARCHITECTURE.md's "Import rules", one row each.
var rules = []rule{
	{From: "agent", Never: []string{"exporter", "api", "cmd"}, Why: "agent never imports exporter, api or cmd"},
	{From: "exporter", Never: []string{"api", "probes", "test"}, Why: "exporter never imports api, probes/ or test/"},
	{From: "exporter", Besides: []string{"exporter/dashboards"}, Only: []string{"agent", "internal/config", "exporter"}, Why: "exporter imports agent, internal/config and its own packages only"},
	{From: "exporter/dashboards", Only: []string{"exporter", "internal/fleetquery"}, Why: "exporter/dashboards imports exporter and internal/fleetquery (the fleet row's queries) only"},
	{From: "internal/fleetquery", Only: []string{}, Why: "internal/fleetquery is a leaf: it imports nothing of ours"},
	{From: "api", Never: []string{"exporter", "probes", "test"}, Why: "api never imports exporter, probes/ or test/"},
	{From: "api", Only: []string{"agent", "internal/apiconst", "api"}, Why: "api imports agent, agent/history, agent/mapview and internal/apiconst only"},
	{From: "exporter/otlp", Only: []string{"internal/config"}, Why: "exporter/otlp imports nothing of ours but internal/config"},
	{From: "probes", Only: []string{"internal/sysfile", "internal/bpfsys", "probes"}, Why: "probes import nothing of ours but internal/sysfile, internal/bpfsys and probes/"},
	{From: "agent/owners", Only: []string{"internal/bpfsys"}, Why: "agent/owners imports nothing of ours but internal/bpfsys"},
	{From: "agent/internal/reader", Never: []string{"agent"}, Except: []string{"agent/internal/prog", "agent/owners"}, Why: "the reader imports neither agent nor agent/internal/stats"},
	{From: "internal/config", Only: []string{"internal/apiconst"}, Why: "internal/config is a leaf: it imports internal/apiconst only"},
	{From: "", Never: []string{"test", "internal/syncbuf", "exporter/internal/faultaddr"}, Why: "no product package imports test/, internal/syncbuf or exporter/internal/faultaddr"},
}

// under reports whether path is dir or inside it ("" is the whole module).
func under(path, dir string) bool {
	return dir == "" || path == dir || strings.HasPrefix(path, dir+"/")
}

func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if under(path, d) {
			return true
		}
	}
	return false
}

// importFaults lists each import that breaks a rule, one line each.
func importFaults(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if under(p.Path, "test") {
			continue // the tests' own folder is not product code
		}
		for _, r := range rules {
			if !under(p.Path, r.From) || underAny(p.Path, r.Besides) {
				continue
			}
			for _, imp := range p.Imports {
				bad := underAny(imp, r.Never) && !underAny(imp, r.Except)
				if r.Only != nil && !underAny(imp, r.Only) {
					bad = true
				}
				if bad {
					out = append(out, fmt.Sprintf("%s imports %s: %s (ARCHITECTURE.md, \"Import rules\")", p.Path, imp, r.Why))
				}
			}
		}
	}
	return out
}

// leanFaults lists what the CLI build (-tags lean) of cmd/bpfleet links
// that it must not: it execs bpfleet-agent instead.
func leanFaults(deps []string) []string {
	var out []string
	for _, d := range deps {
		if underAny(d, []string{"exporter", "api", "agent/kube"}) {
			out = append(out, fmt.Sprintf("the CLI build (-tags lean) of cmd/bpfleet links %s: it must link no exporter, api or agent/kube (ARCHITECTURE.md, \"Import rules\")", d))
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	n := 0
	// Files behind build tags import too: check each tag set the Makefile builds.
	for _, tags := range []string{"", "lean", "bench"} {
		pkgs := listPackages(t, root, tags)
		n += len(pkgs)
		for _, f := range importFaults(pkgs) {
			t.Errorf("%s%s", tagNote(tags), f)
		}
	}
	if n < 3*30 {
		t.Fatalf("go list gave %d packages over three tag sets: not the module's", n)
	}
	deps := listLines(t, root, "list", "-tags", "lean", "-deps", "./cmd/bpfleet")
	var ours []string
	for _, d := range deps {
		if strings.HasPrefix(d, module) {
			ours = append(ours, strings.TrimPrefix(d, module))
		}
	}
	if len(ours) < 10 {
		t.Fatalf("the lean build of cmd/bpfleet links %d of our packages: not read right", len(ours))
	}
	for _, f := range leanFaults(ours) {
		t.Error(f)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "github.com/prometheus/client_golang/api") {
			t.Errorf("the CLI build (-tags lean) of cmd/bpfleet links %s: bpfleet fleet execs bpfleet-agent instead (ARCHITECTURE.md, \"Import rules\")", d)
		}
	}
}

func TestFileSizes(t *testing.T) {
	root := moduleRoot(t)
	files := listLines(t, root, "list", "-e", "-f",
		`{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .IgnoredGoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}`, "./...")
	checked := 0
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(rel, "_test.go") || under(filepath.ToSlash(rel), "test") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if generated(b) {
			continue
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines, over the %d a product Go file may have: split it along a seam", rel, n, maxLines)
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d product Go files: not the module's", checked)
	}
}

// generated reports whether b carries Go's "Code generated ... DO NOT EDIT."
// line: such files follow their generator, not the limit.
func generated(b []byte) bool {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		l := s.Text()
		if strings.HasPrefix(l, "// Code generated ") && strings.HasSuffix(l, " DO NOT EDIT.") {
			return true
		}
		if strings.HasPrefix(l, "package ") {
			return false
		}
	}
	return false
}

func tagNote(tags string) string {
	if tags == "" {
		return ""
	}
	return "-tags " + tags + ": "
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.HasPrefix(b, []byte("module "+strings.TrimSuffix(module, "/")+"\n")) {
		t.Fatalf("%s is not the module's root (go.mod: %v)", root, err)
	}
	return root
}

func listPackages(t *testing.T, root, tags string) []pkg {
	t.Helper()
	args := []string{"list", "-e", "-json=ImportPath,Imports"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out := goCmd(t, root, append(args, "./...")...)
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		q := pkg{Path: strings.TrimPrefix(p.ImportPath, module)}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				q.Imports = append(q.Imports, strings.TrimPrefix(imp, module))
			}
		}
		sort.Strings(q.Imports)
		pkgs = append(pkgs, q)
	}
	return pkgs
}

func listLines(t *testing.T, root string, args ...string) []string {
	t.Helper()
	return strings.Fields(string(goCmd(t, root, args...)))
}

func goCmd(t *testing.T, root string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
