package servers

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// A missing binary is an error callers can tell apart (testenv skips on
// it): it matches ErrNotInstalled and names the Debian package.
func TestMissingBinary(t *testing.T) {
	_, err := LookBinary("servers-no-such-binary", "servers-pkg")
	var m *MissingError
	if !errors.Is(err, ErrNotInstalled) || !errors.As(err, &m) || m.Package != "servers-pkg" ||
		!strings.Contains(err.Error(), "apt-get install -y servers-pkg") {
		t.Errorf("LookBinary(missing) = %v; want a *MissingError naming servers-pkg that matches ErrNotInstalled", err)
	}
	if _, err := PostgresBinDir(t.TempDir()); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), `"postgresql"`) {
		t.Errorf("PostgresBinDir(empty dir) = %v; want ErrNotInstalled naming postgresql", err)
	}
}

// Faults on a server that is not running are errors, not test failures,
// and the server's output reaches the Logger, one line per call, with its
// name; Close leaves nothing running.
func TestRedisLifecycle(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	r, err := StartRedis(context.Background(), RedisOptions{Bin: requireBinary(t, "redis-server"), Log: WriterLogger(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	redisSetGet(t, r.Addr, "k", "v")
	pid := r.PID()
	if err := r.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if st, _ := ProcState(pid); st != 'T' {
		t.Errorf("state after Pause = %c, want T", st)
	}
	if err := r.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	r.Kill()
	if err := r.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Pause after Kill = %v, want ErrNotRunning", err)
	}
	if err := r.Resume(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Resume after Kill = %v, want ErrNotRunning", err)
	}
	if err := r.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	redisSetGet(t, r.Addr, "k", "v2")
	r.Close()
	if r.PID() != 0 {
		t.Errorf("PID after Close = %d, want 0", r.PID())
	}
	if _, ok := ProcState(pid); ok {
		t.Errorf("process %d still exists after Kill and Close", pid)
	}
}

// A cancelled context ends a start that would otherwise wait for readiness,
// with an error matching the context's, and leaves nothing running.
func TestStartHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := StartEtcd(ctx, 1, EtcdOptions{Bin: requireBinary(t, "etcd"), Log: t})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("StartEtcd(cancelled) = %v, want context.Canceled", err)
	}
}
