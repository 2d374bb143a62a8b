package cli

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/lock/locktest"
)

// startMemGateway serves a gateway over the reference locker; stop closes
// it (WebSocket connections included) early.
func startMemGateway(t *testing.T) (stop func(), addr string) {
	t.Helper()
	g := gateway.New(locktest.NewMemStore().NewLocker(), gateway.Options{})
	srv := httptest.NewServer(g)
	stop = func() { g.Close(); srv.Close() }
	t.Cleanup(stop)
	return stop, strings.TrimPrefix(srv.URL, "http://")
}

func TestRunPassesTokenAndStatus(t *testing.T) {
	_, addr := startMemGateway(t)
	code, out, errOut := run(t, "run", "--endpoints", addr, "--key", "job", "--",
		"sh", "-c", `echo "token=$LOCKGATE_FENCING_TOKEN key=$LOCKGATE_LOCK_KEY"; exit 3`)
	if code != 3 {
		t.Fatalf("exit %d, want the command's 3 (stderr %q)", code, errOut)
	}
	if !strings.Contains(out, "token=1 key=job") {
		t.Errorf("the command saw %q, want token=1 key=job", out)
	}
	// The lock was released when the command exited: a second run gets it
	// at once, with a higher token.
	code, out, _ = run(t, "run", "--endpoints", addr, "--key", "job", "--wait", "2s", "--", "sh", "-c", `echo "token=$LOCKGATE_FENCING_TOKEN"`)
	if code != 0 || !strings.Contains(out, "token=2") {
		t.Errorf("second run: exit %d, output %q", code, out)
	}
	code, _, errOut = run(t, "run", "--endpoints", addr, "--key", "job", "--", "/nonexistent/cmd")
	if code != 127 || !strings.Contains(errOut, "nonexistent") {
		t.Errorf("missing command: exit %d, stderr %q", code, errOut)
	}
}

// TestRunStopsCommandWhenLeaseLost: the gateway disappears, renewals fail,
// the lease runs out, and the command is stopped.
func TestRunStopsCommandWhenLeaseLost(t *testing.T) {
	stop, addr := startMemGateway(t)
	started := filepath.Join(t.TempDir(), "started")
	go func() {
		// The gateway goes once the command runs, i.e. holds the lock.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(started); err == nil {
				break
			}
		}
		stop()
	}()
	start := time.Now()
	code, _, errOut := run(t, "run", "--endpoints", addr, "--key", "job", "--ttl", "1s", "--kill-after", "1s", "--",
		"sh", "-c", `touch "$0"; exec sleep 30`, started)
	if code != ExitLeaseLost {
		t.Fatalf("exit %d, want %d (stderr %q)", code, ExitLeaseLost, errOut)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the command ran %v after the lease was lost", took)
	}
	if !strings.Contains(errOut, "lost") {
		t.Errorf("stderr %q does not say the lease was lost", errOut)
	}
}

func TestLockCommands(t *testing.T) {
	_, addr := startMemGateway(t)
	code, out, errOut := run(t, "lock", "acquire", "k", "--endpoints", addr, "--ttl", "1m", "--value", "v")
	if code != 0 || !strings.Contains(out, `"fencing_token": 1`) {
		t.Fatalf("acquire: %d %q %q", code, out, errOut)
	}
	token := between(out, `"lock_token": "`, `"`)
	if code, _, errOut := run(t, "lock", "acquire", "k", "--endpoints", addr); code == 0 || !strings.Contains(errOut, "held") {
		t.Errorf("second acquire: %d %q", code, errOut)
	}
	if code, out, _ := run(t, "lock", "inspect", "k", "--endpoints", addr); code != 0 || !strings.Contains(out, `"value": "v"`) {
		t.Errorf("inspect: %d %q", code, out)
	}
	if code, out, errOut := run(t, "lock", "renew", "k", "--endpoints", addr, "--lock-token", token, "--fencing-token", "1"); code != 0 || !strings.Contains(out, "renewed") {
		t.Errorf("renew: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := run(t, "lock", "release", "k", "--endpoints", addr, "--lock-token", token, "--fencing-token", "1"); code != 0 {
		t.Errorf("release: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "lock", "release", "k", "--endpoints", addr, "--lock-token", token, "--fencing-token", "1"); code == 0 || !strings.Contains(errOut, "not held") {
		t.Errorf("second release: %d %q", code, errOut)
	}
}

func between(s, a, b string) string {
	i := strings.Index(s, a)
	if i < 0 {
		return ""
	}
	s = s[i+len(a):]
	return s[:strings.Index(s, b)]
}
