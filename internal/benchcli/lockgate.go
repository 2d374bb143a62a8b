package benchcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/internal/servers"
)

// lockgateFlag names the lockgate binary the bench runs.
const lockgateFlag = "lockgate"

// lockgateBinary returns the lockgate binary the bench runs as its
// raftlock nodes (`lockgate node`) and campaigners (`lockgate elect`):
// --lockgate; else lockgate beside this program (the two are installed
// together); else, inside lockgate's source tree (`go run
// ./cmd/lockgate-bench`), one built from it as it is on disk; else lockgate
// on PATH.
func lockgateBinary(cmd *cobra.Command) (string, error) {
	if f := cmd.Flag(lockgateFlag); f != nil && f.Value.String() != "" {
		return filepath.Abs(f.Value.String())
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "lockgate")
		if st, err := os.Stat(beside); err == nil && !st.IsDir() {
			return beside, nil
		}
	}
	if dir, ok := sourceTree(); ok {
		out := filepath.Join(servers.DefaultBuildCache(), "lockgate-source")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return "", err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "building lockgate from the source tree at %s\n", dir)
		if err := servers.BuildLockgate(context.Background(), dir, out); err != nil {
			return "", err
		}
		return out, nil
	}
	if p, err := exec.LookPath("lockgate"); err == nil {
		return p, nil
	}
	return "", errors.New("no lockgate binary for the raftlock nodes: give --lockgate, install lockgate beside lockgate-bench, or run inside lockgate's source tree")
}

// sourceTree returns the root of lockgate's module around the working
// directory, if there is one.
func sourceTree() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			return dir, strings.TrimSpace(first) == "module github.com/lockgate/lockgate"
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
