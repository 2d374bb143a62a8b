package spec

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueRef finds a reference to an issue of this project's own tracker
// (the word issue, or issues, and a number), which a reader of the
// repository cannot look up: code, comments, help texts and docs name the idea or a
// published source instead. Another project's issue, named with its
// project ("etcd issue 11456", "etcd#20418", "golang/go#75804"), is fine.
var issueRef = regexp.MustCompile(`\b[Ii]ssues? #?[0-9]+\b`)

// otherProject says that a match names another project's issue: the word
// before it is the project ("etcd issue 11456").
var otherProject = regexp.MustCompile(`\b(etcd|raft|consul|zookeeper|redis|redsync|porcupine|jepsen|go|golang|kubernetes|hashicorp|postgres|postgresql|chromium|firefox|node|python)\s+$`)

// TestNoIssueReferences: no tracked Go, TypeScript, Python or Markdown
// file refers to an issue of this project's tracker.
func TestNoIssueReferences(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go", "*.ts", "*.py", "*.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files: the walk is broken", len(files))
	}
	for _, f := range files {
		if strings.Contains(f, "/node_modules/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the working tree
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			for _, loc := range issueRef.FindAllStringIndex(line, -1) {
				if otherProject.MatchString(strings.ToLower(line[:loc[0]])) {
					continue
				}
				t.Errorf("%s:%d refers to an issue of this project's tracker (%q): name the idea or a published source", f, n, line[loc[0]:loc[1]])
			}
		}
	}
}

// The check itself: it must catch this project's references and pass
// another project's.
func TestIssueRefPattern(t *testing.T) {
	// Built from parts, so that this file passes the check it tests.
	issue, issues := "iss"+"ue", "Iss"+"ues"
	for line, want := range map[string]bool{
		"// since " + issue + " 22 the gateway …": true,
		"see " + issues + " #3 and 4":             true,
		"(etcd issue 11456: a waiter granted)":    false,
		"etcd#20418 and golang/go#75804":          false,
		"no issue here":                           false,
	} {
		got := false
		for _, loc := range issueRef.FindAllStringIndex(line, -1) {
			if !otherProject.MatchString(strings.ToLower(line[:loc[0]])) {
				got = true
			}
		}
		if got != want {
			t.Errorf("%q: flagged %v, want %v", line, got, want)
		}
	}
}
