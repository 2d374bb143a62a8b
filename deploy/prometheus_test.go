package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lockgate/lockgate/internal/testenv"
)

const (
	rulesFile     = "prometheus/lockgate-rules.yml"
	rulesTestFile = "prometheus/lockgate-rules-test.yml"
	operationsDoc = "../docs/operations.md"
	// runbookBase is where every runbook annotation points: a playbook of
	// docs/operations.md, on the repository's published default branch.
	runbookBase = "https://github.com/lockgate/lockgate/blob/main/docs/operations.md#"
)

// alertRule is an alerting rule of the rules file.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// readRules returns the alerting rules of the rules file, in order.
func readRules(t *testing.T) []alertRule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return out
}

// promtool returns the path of promtool (Debian package prometheus): the
// test is skipped without it, or fails under CI=true (testenv's policy).
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.RequireBinary(t, "promtool", "prometheus")
}

// runPromtool runs promtool with args in dir and returns its output and
// whether it exited 0.
func runPromtool(t *testing.T, bin, dir string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("promtool %s: %v", strings.Join(args, " "), err)
	}
	return string(out), err == nil
}

// TestPrometheusRules: promtool accepts the rules (syntax, PromQL,
// templates) and their unit tests pass: each alert fires on its synthetic
// unhealthy series, for the unhealthy target only, with the expected
// labels and rendered annotations, and none fires on a healthy cluster.
func TestPrometheusRules(t *testing.T) {
	bin := promtool(t)
	if out, ok := runPromtool(t, bin, ".", "check", "rules", rulesFile); !ok {
		t.Fatalf("promtool check rules %s:\n%s", rulesFile, out)
	}
	if out, ok := runPromtool(t, bin, ".", "test", "rules", rulesTestFile); !ok {
		t.Fatalf("promtool test rules %s:\n%s", rulesTestFile, out)
	}
}

// rulesTests is the part of the unit test file that says which alerts
// each test expects.
type rulesTests struct {
	Tests []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestPrometheusRulesTested: every alert has a case in the unit tests
// where it fires and one where it stays quiet, and the tests can fail: an
// alert whose expression never fires (a mutant of the rules file) fails
// promtool's tests.
func TestPrometheusRulesTested(t *testing.T) {
	rules := readRules(t)
	data, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf rulesTests
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range rules {
		if !fires[r.Alert] {
			t.Errorf("%s: no test in %s in which %s fires", rulesFile, rulesTestFile, r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no test in %s in which %s stays quiet", rulesFile, rulesTestFile, r.Alert)
		}
	}

	// One mutant in which no alert ever fires: promtool must report a
	// failed expectation for each of them.
	bin := promtool(t)
	orig, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(orig, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		// Through the YAML tree, so that a block scalar is replaced whole.
		if !setExpr(&doc, r.Alert, "vector(0) > 1") {
			t.Fatalf("%s not found in the YAML tree", r.Alert)
		}
	}
	mutant, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{filepath.Base(rulesFile): mutant, filepath.Base(rulesTestFile): data} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, ok := runPromtool(t, bin, dir, "check", "rules", filepath.Base(rulesFile)); !ok {
		t.Fatalf("the mutant does not load:\n%s", out)
	}
	out, ok := runPromtool(t, bin, dir, "test", "rules", filepath.Base(rulesTestFile))
	if ok {
		t.Fatal("promtool test rules passed with no alert ever firing")
	}
	for _, r := range rules {
		if !strings.Contains(out, "alertname: "+r.Alert+",") {
			t.Errorf("promtool test rules did not notice that %s never fires", r.Alert)
		}
	}
	if t.Failed() {
		t.Logf("promtool's output on the mutant:\n%s", out)
	}
}

// setExpr sets the expr of alert name in a rules file's YAML tree.
func setExpr(n *yaml.Node, name, expr string) bool {
	if n.Kind == yaml.MappingNode {
		var isAlert bool
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "alert" && n.Content[i+1].Value == name {
				isAlert = true
			}
		}
		if isAlert {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "expr" {
					n.Content[i+1].Value, n.Content[i+1].Style = expr, 0
					return true
				}
			}
		}
	}
	for _, c := range n.Content {
		if setExpr(c, name, expr) {
			return true
		}
	}
	return false
}

// docAlerts maps each row of docs/operations.md's table of alerts worth
// setting (its first column) to the rules that implement it.
var docAlerts = map[string][]string{
	"no leader":             {"LockgateNoLeader"},
	"node down":             {"LockgateNodeDown"},
	"leader flapping":       {"LockgateLeaderFlapping"},
	"follower behind":       {"LockgateFollowerOutOfContact", "LockgateFollowerBehind"},
	"slow commits":          {"LockgateSlowCommits"},
	"unavailable":           {"LockgateUnavailable"},
	"slow grants":           {"LockgateSlowGrants"},
	"waiters piling up":     {"LockgateWaitersPilingUp", "LockgateTooManyWaiters"},
	"leases lost to expiry": {"LockgateLeasesLost"},
	"disk":                  {"LockgateDiskFilling"},
	"memory":                {"LockgateMemoryHigh"},
	"clock":                 {"LockgateClockSkew"},
}

// docAlertRows returns the first column of the alerts table of
// docs/operations.md (the table whose header starts "| alert |").
func docAlertRows(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "| alert |"):
			in = true
		case in && strings.HasPrefix(l, "|---"):
		case in && strings.HasPrefix(l, "| "):
			cell, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
			rows = append(rows, cell)
		default:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table of alerts (a header \"| alert |\")", operationsDoc)
	}
	return rows
}

// TestPrometheusRulesMatchDocs: every alert the operations guide
// recommends is a rule, every rule implements one, and each rule has a
// severity and a runbook annotation pointing at an anchor that exists in
// docs/operations.md.
func TestPrometheusRulesMatchDocs(t *testing.T) {
	rules := readRules(t)
	names := map[string]alertRule{}
	for _, r := range rules {
		if _, dup := names[r.Alert]; dup {
			t.Errorf("%s: alert %s defined twice", rulesFile, r.Alert)
		}
		names[r.Alert] = r
	}
	covered := map[string]bool{}
	for _, row := range docAlertRows(t) {
		impl, ok := docAlerts[row]
		if !ok {
			t.Errorf("%s recommends the alert %q, which no rule implements (add it to %s and to docAlerts)", operationsDoc, row, rulesFile)
		}
		for _, a := range impl {
			if _, ok := names[a]; !ok {
				t.Errorf("alert %q of %s: rule %s not in %s", row, operationsDoc, a, rulesFile)
			}
			covered[a] = true
		}
	}
	anchors := docAnchors(t, operationsDoc)
	for _, r := range rules {
		if !covered[r.Alert] {
			t.Errorf("%s: %s implements no alert of %s's table", rulesFile, r.Alert, operationsDoc)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook"], runbookBase)
		if !ok {
			t.Errorf("%s: runbook %q is not under %s", r.Alert, r.Annotations["runbook"], runbookBase)
		} else if !anchors[anchor] {
			t.Errorf("%s: runbook anchor #%s is not in %s", r.Alert, anchor, operationsDoc)
		}
	}
}

var (
	explicitAnchor = regexp.MustCompile(`<a id="([^"]+)"></a>`)
	slugDrop       = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// docAnchors returns the anchors of a Markdown file as GitHub renders
// them: each heading's slug (lower case, punctuation dropped, spaces as
// dashes) and every explicit <a id="...">.
func docAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence {
			continue
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "#") {
			out[strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
		for _, m := range explicitAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

func TestDocAnchors(t *testing.T) {
	a := docAnchors(t, operationsDoc)
	for _, want := range []string{"failure-playbooks", "a-three-node-production-layout", "monitoring"} {
		if !a[want] {
			t.Errorf("docAnchors(%s) lacks %q: the slugs are computed wrong", operationsDoc, want)
		}
	}
	if a["no-such-section"] {
		t.Error("docAnchors invents anchors")
	}
	if len(a) < 10 {
		t.Errorf("docAnchors found %d anchors", len(a))
	}
}
