package testenv

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// Redis is a redis-server process (an independent master, no persistence)
// owned by a test: a servers.Redis whose faults fail the test instead of
// returning errors. It is stopped by a t.Cleanup registered by StartRedis.
// Its methods must not be called after the test has finished.
type Redis struct {
	*servers.Redis
	t testing.TB
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 and returns
// once it answers PING. It skips (or under CI=true fails) the test if
// redis-server is not installed, and fails the test with the tail of the
// server's log if it does not become ready within 30 seconds. The server is
// stopped, and its directory removed, when the test and its subtests finish.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return StartRedisN(t, 1)[0]
}

// StartRedisN starts n independent redis-server masters concurrently (see
// StartRedis) and returns them once all answer PING.
func StartRedisN(t testing.TB, n int) []*Redis {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: StartRedisN: n = %d, want at least 1", n)
	}
	bin := RequireBinary(t, "redis-server", "redis-server")
	rs, err := servers.StartRedisN(context.Background(), n, servers.RedisOptions{Bin: bin, Log: t})
	if err != nil {
		failStart(t, "StartRedisN", err)
	}
	out := make([]*Redis, len(rs))
	for i, r := range rs {
		t.Cleanup(r.Close)
		out[i] = &Redis{Redis: r, t: t}
	}
	return out
}

// Restart starts the server again on the same port and directory (stopping
// it first if it is still running) and returns once it answers PING; the
// test fails if it does not. As persistence is off, the restarted server
// holds no keys.
func (r *Redis) Restart() {
	r.t.Helper()
	if err := r.Redis.Restart(); err != nil {
		r.t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the server with SIGSTOP: connections stay open (and new
// ones are accepted by the kernel) but no command is answered until Resume.
func (r *Redis) Pause() { r.t.Helper(); errorf(r.t, r.Redis.Pause()) }

// Resume continues a paused server with SIGCONT. Pausing or resuming a server
// that is not running marks the test failed (t.Errorf).
func (r *Redis) Resume() { r.t.Helper(); errorf(r.t, r.Redis.Resume()) }

// errorf marks the test failed with err, if any.
func errorf(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("testenv: %v", err)
	}
}
