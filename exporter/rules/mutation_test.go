package rules

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/bpfleet/bpfleet/test/backends"
)

// TestRulesCasesCanFail proves that every case of bpfleet.rules_test.yaml
// can fail, by breaking the rule it tests. Each alert_rule_test and
// promql_expr_test entry runs alone (its group's input, only that entry)
// against mutants of the rules file, all in one promtool run:
//
//   - an entry that expects alerts fails when its alert never fires;
//   - an entry that expects none (exp_alerts: []) is evaluated after its
//     rule's for: has elapsed since the latest of its input series began,
//     and fails under at least one mutant that changes the rule's
//     condition: a comparison flipped (> to <=, == to !=, ...) or an
//     exception dropped (an unless or and clause), or, for a rule with
//     neither (absent()), one that always fires;
//   - a promql_expr_test entry reads a recorded rule and fails when that
//     rule records nothing;
//   - every alert has both kinds of entry, and every entry passes against
//     the rules as they are.
//
// So a case that checks nothing (evaluated before its rule could fire, or
// about an input the rule ignores) fails here, whatever rules change.
func TestRulesCasesCanFail(t *testing.T) {
	bin := backends.Bin(t, "promtool", backends.PrometheusVersion)
	var rules rulesDoc
	readYAML(t, rulesFile, &rules)
	var tests testsDoc
	readYAML(t, "bpfleet.rules_test.yaml", &tests)

	alerts, records := map[string]rule{}, map[string]rule{}
	for gi, g := range rules.Groups {
		for ri, r := range g.Rules {
			rl := rule{group: gi, index: ri, expr: str(r["expr"])}
			if d := str(r["for"]); d != "" {
				f, err := time.ParseDuration(d)
				if err != nil {
					t.Fatalf("rule %v: for: %v", r, err)
				}
				rl.forD = f
			}
			if a := str(r["alert"]); a != "" {
				rl.name = a
				alerts[a] = rl
			} else {
				rl.name = str(r["record"])
				records[rl.name] = rl
			}
		}
	}

	// One test group per entry.
	var entries []entry
	for _, g := range tests.Tests {
		onset := inputOnset(t, g)
		for i, a := range list(g["alert_rule_test"]) {
			am := a.(map[string]any)
			name := str(am["alertname"])
			e := entry{id: fmt.Sprintf("%s / alert #%d %s at %s", str(g["name"]), i, name, str(am["eval_time"])), rule: name, group: only(g, "alert_rule_test", am)}
			e.none = len(list(am["exp_alerts"])) == 0
			if _, ok := alerts[name]; !ok {
				t.Errorf("%s: no alert %s in the rules", e.id, name)
				continue
			}
			if e.none {
				at, err := time.ParseDuration(str(am["eval_time"]))
				if err != nil {
					t.Fatalf("%s: eval_time: %v", e.id, err)
				}
				if need := alerts[name].forD + onset; at < need {
					t.Errorf("%s: exp_alerts: [] at %s, before the rule's for: %v could elapse after its input began (%v): it cannot fail", e.id, str(am["eval_time"]), alerts[name].forD, onset)
				}
			}
			entries = append(entries, e)
		}
		for i, p := range list(g["promql_expr_test"]) {
			pm := p.(map[string]any)
			e := entry{id: fmt.Sprintf("%s / expr #%d %s", str(g["name"]), i, str(pm["expr"])), group: only(g, "promql_expr_test", pm), expr: true}
			for name := range records {
				if strings.Contains(str(pm["expr"]), name) {
					e.reads = append(e.reads, name)
				}
			}
			if len(e.reads) == 0 {
				t.Errorf("%s: reads no recorded rule: it tests its own input, not the rules", e.id)
			}
			entries = append(entries, e)
		}
	}
	for name := range alerts {
		var fires, none bool
		for _, e := range entries {
			if e.rule == name {
				fires, none = fires || !e.none, none || e.none
			}
		}
		if !fires || !none {
			t.Errorf("alert %s: a case where it fires %v, one where it does not %v: want both", name, fires, none)
		}
	}

	// The mutants, one rules file each, and a test file for each that
	// runs the entries the mutated rule concerns.
	dir := t.TempDir()
	type mutant struct {
		name, rule, kind string // kind: never, or semantic (a changed condition, or always firing)
		file             string
	}
	var mutants []mutant
	write := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	mutate := func(r rule, kind, how, expr string) {
		var m rulesDoc
		readYAML(t, rulesFile, &m)
		m.Groups[r.group].Rules[r.index]["expr"] = expr
		n := len(mutants)
		mutants = append(mutants, mutant{name: fmt.Sprintf("%s: %s", r.name, how), rule: r.name, kind: kind, file: write(fmt.Sprintf("mutant%02d.rules.json", n), m)})
	}
	const never = "vector(0) > 1"
	for _, r := range alerts {
		mutate(r, "never", "never fires", never)
		sem := conditionMutants(r.expr)
		for how, expr := range sem {
			mutate(r, "semantic", how, expr)
		}
		if len(sem) == 0 {
			mutate(r, "semantic", "always fires", "vector(1)")
		}
	}
	for _, r := range records {
		mutate(r, "never", "records nothing", never)
	}
	// Every mutant must be valid PromQL, or its failures prove nothing.
	files := []string{}
	for _, m := range mutants {
		files = append(files, m.file)
	}
	if out, err := exec.Command(bin, append([]string{"check", "rules"}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the mutants: %v\n%s", err, out)
	}

	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	suite := func(rulesPath string, es []entry) map[string]any {
		var groups []any
		for _, e := range es {
			g := map[string]any{}
			for k, v := range e.group {
				g[k] = v
			}
			g["name"] = e.id
			groups = append(groups, g)
		}
		return map[string]any{"rule_files": []string{rulesPath}, "evaluation_interval": tests.EvaluationInterval, "tests": groups}
	}
	testFiles := []string{write("base.test.json", suite(abs, entries))}
	suiteOf := map[string]int{"base.test.json": -1}
	for i, m := range mutants {
		var es []entry
		for _, e := range entries {
			if e.rule == m.rule || (e.expr && contains(e.reads, m.rule)) {
				es = append(es, e)
			}
		}
		name := fmt.Sprintf("mutant%02d.test.json", i)
		testFiles = append(testFiles, write(name, suite(m.file, es)))
		suiteOf[name] = i
	}
	junit := filepath.Join(dir, "junit.xml")
	out, _ := exec.Command(bin, append([]string{"test", "rules", "--junit=" + junit}, testFiles...)...).CombinedOutput()
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatalf("promtool wrote no JUnit results: %v\n%s", err, out)
	}
	var res junitResults
	if err := xml.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	failed := map[int]map[string]bool{} // mutant (-1: none) → entry ids that failed
	ran := 0
	for _, s := range res.Suites {
		i, ok := suiteOf[filepath.Base(s.Name)]
		if !ok {
			t.Fatalf("JUnit results for an unknown file %s", s.Name)
		}
		failed[i] = map[string]bool{}
		for _, c := range s.Cases {
			ran++
			if c.Failure != nil || c.Error != nil {
				failed[i][c.Name] = true
			}
		}
	}
	if len(failed[-1]) > 0 {
		t.Fatalf("entries failing on their own against the rules as they are: %v\n%s", failed[-1], out)
	}
	for _, e := range entries {
		var by []string
		for i, m := range mutants {
			applies := m.rule == e.rule || (e.expr && contains(e.reads, m.rule))
			wanted := (!e.none && m.kind == "never") || (e.none && m.kind == "semantic")
			if applies && wanted && failed[i][e.id] {
				by = append(by, m.name)
			}
		}
		if len(by) == 0 {
			t.Errorf("%s: no broken rule makes it fail: it tests nothing", e.id)
			continue
		}
		t.Logf("%s: fails when %s", e.id, strings.Join(by, "; "))
	}
	t.Logf("%d entries, %d mutants, %d entry runs in one promtool run", len(entries), len(mutants), ran)
}

type rulesDoc struct {
	Groups []struct {
		Name  string           `json:"name"`
		Rules []map[string]any `json:"rules"`
	} `json:"groups"`
}

type testsDoc struct {
	EvaluationInterval string           `json:"evaluation_interval"`
	Tests              []map[string]any `json:"tests"`
}

type rule struct {
	name         string
	group, index int
	expr         string
	forD         time.Duration
}

// entry is one alert_rule_test or promql_expr_test entry as a test group
// of its own.
type entry struct {
	id    string
	rule  string // the alert, for an alert_rule_test entry
	none  bool   // exp_alerts: []
	expr  bool   // a promql_expr_test entry
	reads []string
	group map[string]any
}

type junitResults struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// only is group g with one entry of kind and nothing else to check.
func only(g map[string]any, kind string, e any) map[string]any {
	out := map[string]any{}
	for k, v := range g {
		if k != "alert_rule_test" && k != "promql_expr_test" {
			out[k] = v
		}
	}
	out[kind] = []any{e}
	return out
}

// inputOnset is when the last of a group's input series has its first
// sample: only from then on could any condition on all of them hold.
func inputOnset(t *testing.T, g map[string]any) time.Duration {
	iv, err := time.ParseDuration(str(g["interval"]))
	if err != nil {
		t.Fatalf("test %s: interval: %v", str(g["name"]), err)
	}
	var onset time.Duration
	for _, s := range list(g["input_series"]) {
		blanks := 0
	tokens:
		for _, tok := range strings.Fields(str(s.(map[string]any)["values"])) {
			switch {
			case tok == "_":
				blanks++
			case strings.HasPrefix(tok, "_x"):
				n, err := strconv.Atoi(tok[2:])
				if err != nil {
					t.Fatalf("test %s: values token %q", str(g["name"]), tok)
				}
				blanks += n
			default:
				break tokens
			}
		}
		onset = max(onset, time.Duration(blanks)*iv)
	}
	return onset
}

var (
	flips      = map[string]string{"==": "!=", "!=": "==", ">=": "<", "<=": ">", ">": "<=", "<": ">="}
	comparison = regexp.MustCompile(`==|!=|>=|<=|>|<`)
	setWord    = regexp.MustCompile(`\b(and|unless|or)\b`)
)

// conditionMutants are the rule expression with one condition changed:
// each comparison flipped, each and / unless clause dropped. It reads
// PromQL as far as these need: label matchers ({...}), strings and
// ranges ([...]) are skipped, and a clause runs from its keyword to the
// next set operator at the same parenthesis depth, or the end of its
// parentheses or function argument.
func conditionMutants(expr string) map[string]string {
	out := map[string]string{}
	code := maskedCode(expr)
	for _, loc := range comparison.FindAllStringIndex(code, -1) {
		op := expr[loc[0]:loc[1]]
		// A two-character operator found as its first character, or an
		// = of =~ / != of !~ in a matcher, never comes here: matchers are
		// masked, and the regexp takes the longest operator first.
		out[fmt.Sprintf("%s at %d flipped to %s", op, loc[0], flips[op])] = expr[:loc[0]] + flips[op] + expr[loc[1]:]
	}
	depth := parenDepths(code)
	for _, loc := range setWord.FindAllStringIndex(code, -1) {
		word := expr[loc[0]:loc[1]]
		if word == "or" {
			continue
		}
		d := depth[loc[0]]
		end := len(expr)
		for i := loc[1]; i < len(code); i++ {
			if depth[i] == d && (code[i] == ')' || code[i] == ',') {
				end = i
				break
			}
			if m := setWord.FindStringIndex(code[i:]); m != nil && m[0] == 0 && depth[i] == d && (i == 0 || !isWord(code[i-1])) {
				end = i
				break
			}
		}
		out[fmt.Sprintf("%s clause at %d dropped", word, loc[0])] = expr[:loc[0]] + expr[end:]
	}
	return out
}

func isWord(c byte) bool {
	return c == '_' || c == ':' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// maskedCode is expr with label matchers, strings and range selectors
// blanked out (same length), so operators and keywords found in it are
// PromQL's own.
func maskedCode(expr string) string {
	b := []byte(expr)
	var quote byte
	depth := 0 // inside {...} or [...]
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
				continue
			}
			if c == quote {
				quote = 0
			}
			b[i] = ' '
		case c == '"' || c == '\'' || c == '`':
			quote = c
			b[i] = ' '
		case c == '{' || c == '[':
			depth++
			b[i] = ' '
		case c == '}' || c == ']':
			depth--
			b[i] = ' '
		case depth > 0:
			b[i] = ' '
		}
	}
	return string(b)
}

// parenDepths is the parenthesis depth at each byte of code.
func parenDepths(code string) []int {
	d := make([]int, len(code))
	n := 0
	for i := range code {
		if code[i] == '(' {
			n++
		}
		d[i] = n
		if code[i] == ')' {
			n--
		}
	}
	return d
}
