package mixedversion

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/servers"
)

// oldRevision is the last commit before entry format 3 (sessions) and the
// format gate: a binary that predates the gate, which counts as reading
// format 1.
const oldRevision = "90dd3c8979d7eb64d152e6a58be1f577b66143d5"

// oldLockgate returns the lockgate binary of oldRevision, built once into
// the user's cache directory. A build that fails (no git, a clone without
// the revision, no module proxy) skips the test, or fails it under
// CI=true, so that CI cannot pass by skipping.
func oldLockgate(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := servers.BuildRevision(ctx, oldRevision, servers.BuildOptions{Log: t})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building lockgate at %s: %v [CI=true: failing instead of skipping]", oldRevision, err)
		}
		t.Skipf("building lockgate at %s: %v (under CI=true this fails)", oldRevision, err)
	}
	return bin
}

// newLockgate builds today's lockgate binary into a temporary directory.
func newLockgate(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "lockgate")
	if err := servers.BuildLockgate(ctx, "", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// poll calls cond every 100 ms until it returns nil, and fails the test
// with its last error when within passes first.
func poll(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(100 * time.Millisecond) // another process's progress: polled
	}
}

// formatStatus asks nd for the format gate.
func formatStatus(nd *servers.RaftNode) (*raftlock.FormatStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return (&raftlock.MembershipClient{Timeout: 5 * time.Second}).FormatStatus(ctx, nd.APIAddr)
}

// logWriter is an io.Writer onto t.Log, a line per Write (the drill
// writes whole lines).
type logWriter struct {
	t  *testing.T
	mu sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
