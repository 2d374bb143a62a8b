package spec

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/internal/wire"
)

// TestTypeScriptErrorCodes: the TypeScript client's ErrorCodes list holds
// exactly the codes of the protocol's table (internal/wire), so that a new
// code cannot be forgotten in one language (forbidden once was).
func TestTypeScriptErrorCodes(t *testing.T) {
	src, err := os.ReadFile("../../clients/js/src/errors.ts")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)export const ErrorCodes = \[(.*?)\] as const`).FindSubmatch(src)
	if block == nil {
		t.Fatal("clients/js/src/errors.ts has no `export const ErrorCodes = [...] as const`")
	}
	var ts []string
	for _, m := range regexp.MustCompile(`"([a-z_]+)"`).FindAllSubmatch(block[1], -1) {
		ts = append(ts, string(m[1]))
	}
	var want []string
	for _, c := range wire.Codes {
		want = append(want, c.Name)
	}
	slices.Sort(ts)
	slices.Sort(want)
	if !slices.Equal(ts, want) {
		var missing, extra []string
		for _, c := range want {
			if !slices.Contains(ts, c) {
				missing = append(missing, c)
			}
		}
		for _, c := range ts {
			if !slices.Contains(want, c) {
				extra = append(extra, c)
			}
		}
		t.Errorf("clients/js/src/errors.ts ErrorCodes: missing %s; not in the protocol's table: %s",
			strings.Join(missing, ", "), strings.Join(extra, ", "))
	}
}

// pythonClientOnly are the codes the Python client gives errors of its own
// making, which no server sends (ClosedError: the client was closed).
var pythonClientOnly = []string{"client_closed"}

// pythonPlain are the protocol's codes the Python client does not name:
// they reach the caller as a plain LockgateError with the code. A new
// code of the protocol's table fails TestPythonErrorCodes until the Python
// client names it (an error class, or a group such as ValidationError's)
// or it is added here, so that it cannot be forgotten there either.
var pythonPlain = []string{"internal", "method_not_allowed", "too_many_sessions", "too_many_tickets", "too_many_watches", "unsupported_media_type"}

// TestPythonErrorCodes: the codes the Python client names (its error
// classes' codes, the codes error_from_reply tells apart and the groups
// it maps to ValidationError and UnavailableError) are codes of the
// protocol's table (internal/wire), or its own (pythonClientOnly); and
// every code of the table is named there or listed in pythonPlain. The
// package's modules are read wherever the code table lives among them.
func TestPythonErrorCodes(t *testing.T) {
	root := filepath.Join("..", "..", "clients", "python", "lockgate")
	var src []byte
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".py") {
			return err
		}
		b, err := os.ReadFile(path)
		src = append(src, b...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`__init__\(\s*"([a-z_]+)"`), // a class's own code: super().__init__("held", …)
		regexp.MustCompile(`code == "([a-z_]+)"`),      // error_from_reply's cases
	} {
		for _, m := range re.FindAllSubmatch(src, -1) {
			named[string(m[1])] = true
		}
	}
	// The groups: module-level sets of codes, _VALIDATION = {"bad_json", …}.
	for _, set := range regexp.MustCompile(`(?m)^_[A-Z_]+ = \{([^}]*)\}`).FindAllSubmatch(src, -1) {
		for _, m := range regexp.MustCompile(`"([a-z_]+)"`).FindAllSubmatch(set[1], -1) {
			named[string(m[1])] = true
		}
	}
	if len(named) < 10 {
		t.Fatalf("found only %d codes in clients/python/lockgate: the patterns no longer match the client's code", len(named))
	}
	table := map[string]bool{}
	for _, c := range wire.Codes {
		table[c.Name] = true
	}
	var unknown, forgotten, stale []string
	for c := range named {
		if !table[c] && !slices.Contains(pythonClientOnly, c) {
			unknown = append(unknown, c)
		}
	}
	for c := range table {
		if !named[c] && !slices.Contains(pythonPlain, c) {
			forgotten = append(forgotten, c)
		}
	}
	for _, c := range pythonPlain {
		if named[c] || !table[c] {
			stale = append(stale, c)
		}
	}
	slices.Sort(unknown)
	slices.Sort(forgotten)
	slices.Sort(stale)
	if len(unknown) > 0 {
		t.Errorf("clients/python/lockgate names codes that are not in the protocol's table: %s", strings.Join(unknown, ", "))
	}
	if len(forgotten) > 0 {
		t.Errorf("codes of the protocol's table the Python client does not name (name them in clients/python/lockgate, or list them in pythonPlain): %s", strings.Join(forgotten, ", "))
	}
	if len(stale) > 0 {
		t.Errorf("pythonPlain lists codes the Python client names, or that the table lacks: %s", strings.Join(stale, ", "))
	}
}
