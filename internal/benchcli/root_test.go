package benchcli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/internal/cli"
)

// run runs lockgate-bench with args and returns its exit code, stdout and
// stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHelp: the program and every command say what they do, under the
// program's name.
func TestHelp(t *testing.T) {
	code, out, errOut := run(t, "--help")
	if code != 0 || !strings.Contains(out, "lockgate-bench [command]") {
		t.Fatalf("--help: exit %d, %q %q", code, out, errOut)
	}
	for _, c := range NewRoot(io.Discard, io.Discard).Commands() {
		if code, out, errOut := run(t, c.Name(), "--help"); code != 0 || !strings.Contains(out, "lockgate-bench "+c.Name()) {
			t.Errorf("%s --help: exit %d, %q %q", c.Name(), code, out, errOut)
		}
	}
	for _, name := range []string{"latency", "chaos", "campaign", "election", "matrix", "scale", "check", "tenants", "upgrade", "soak", "config", "version", "completion"} {
		if c, _, err := NewRoot(io.Discard, io.Discard).Find([]string{name}); err != nil || c.Name() != name {
			t.Errorf("no command %s", name)
		}
	}
}

// TestCheckArgs: a bench command line is checked as lockgate's are.
func TestCheckArgs(t *testing.T) {
	root := NewRoot(io.Discard, io.Discard)
	if err := cli.CheckArgsOf(root, []string{"latency", "--backend", "raft"}, nil); err != nil {
		t.Errorf("latency --backend raft: %v", err)
	}
	if err := cli.CheckArgsOf(root, []string{"latency", "--nodez", "3"}, nil); err == nil || !strings.Contains(err.Error(), "unknown flag: --nodez") {
		t.Errorf("latency --nodez: %v", err)
	}
}

// TestConfig: the settings' precedence and `config print` are lockgate's.
func TestConfig(t *testing.T) {
	// The bench's settings print as lockgate's do: a titled table of
	// each setting, its value and where the value came from.
	want := []string{"# lockgate-bench latency: effective configuration", "SETTING", "clients", "32", "default"}
	code, out, errOut := run(t, "config", "print", "--for", "latency")
	if missing := slices.DeleteFunc(want, func(w string) bool { return strings.Contains(out, w) }); code != 0 || len(missing) > 0 {
		t.Errorf("config print --for latency: exit %d (%s), missing %q in:\n%s", code, errOut, missing, out)
	}
	// A list of the right type for one command is fine even if another
	// command has a scalar setting of that name (latency's --backend is a
	// list, chaos's a string).
	path := filepath.Join(t.TempDir(), "lockgate.yaml")
	if err := os.WriteFile(path, []byte("backend: [raft, redlock]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "--config", path, "version"); code != 0 {
		t.Errorf("valid file: exit %d: %s", code, errOut)
	}
}
