package cli

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// run executes the CLI in-process and returns its exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut syncBuffer
	code := Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a command
// and the child process it runs (exec copies the child's output in a
// goroutine when the writer is not a file).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelpListsCommands(t *testing.T) {
	code, out, _ := run(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, want := range []string{"version", "--log-level", "--config"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not mention %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "lockgate "+Version+" (commit "+Commit) {
		t.Fatalf("version: exit %d, output %q", code, out)
	}
	if code, _, errOut := run(t, "version", "extra"); code == 0 || !strings.Contains(errOut, "unknown command") && !strings.Contains(errOut, "accepts 0 arg") {
		t.Errorf("version with an argument: exit %d, %q", code, errOut)
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, errOut := run(t, "frobnicate")
	if code == 0 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
}

func TestLogLevel(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	if code, _, errOut := run(t, "--log-level", "loud", "version"); code == 0 || !strings.Contains(errOut, `--log-level "loud"`) {
		t.Errorf("bad --log-level: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := run(t, "--log-level", "debug", "version"); code != 0 {
		t.Fatalf("--log-level debug: exit %d", code)
	}
	if !slog.Default().Enabled(context.Background(), slog.LevelDebug) {
		t.Error("--log-level debug did not enable debug logging")
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lockgate.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigFile(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	ctx := context.Background()

	p := writeConfig(t, "log-level: error\n")
	if code, _, errOut := run(t, "--config", p, "version"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if slog.Default().Enabled(ctx, slog.LevelWarn) {
		t.Error("log-level from the config file was not applied")
	}
	// The command line wins over the file.
	if code, _, errOut := run(t, "--config", p, "--log-level", "debug", "version"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !slog.Default().Enabled(ctx, slog.LevelDebug) {
		t.Error("--log-level on the command line did not win over the config file")
	}

	for _, tc := range []struct{ body, want string }{
		{"log-level: info\nbogus: 1\n", `lockgate.yaml:2: unknown setting "bogus"`},
		{"log-level: [\n", "lockgate.yaml"},
		{"- a\n- b\n", "lockgate.yaml:1: want a mapping"},
		{"log-level: shouty\n", `--log-level "shouty"`},
	} {
		code, _, errOut := run(t, "--config", writeConfig(t, tc.body), "version")
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("config %q: exit %d, stderr %q, want it to mention %q", tc.body, code, errOut, tc.want)
		}
	}
	if code, _, errOut := run(t, "--config", filepath.Join(t.TempDir(), "missing.yaml"), "version"); code == 0 || !strings.Contains(errOut, "no such file") {
		t.Errorf("missing config file: exit %d, stderr %q", code, errOut)
	}
}

// TestBenchMoved: `lockgate bench …` says where the bench went.
func TestBenchMoved(t *testing.T) {
	code, _, errOut := run(t, "bench", "latency", "--backend", "raft")
	if code != 1 || !strings.Contains(errOut, "lockgate-bench latency --backend raft") {
		t.Errorf("lockgate bench latency: exit %d, %q; want 1 and a pointer to lockgate-bench", code, errOut)
	}
}
