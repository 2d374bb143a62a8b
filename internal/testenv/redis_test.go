package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newRedisClient(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  timeout,
		ReadTimeout:  timeout,
		WriteTimeout: timeout,
		MaxRetries:   -1, // fail fast: no hidden retries past a pause
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func redisSetGet(t *testing.T, addr, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := newRedisClient(t, addr, 2*time.Second)
	if err := c.Set(ctx, key, val, 0).Err(); err != nil {
		t.Fatalf("SET %s on %s: %v", key, addr, err)
	}
	got, err := c.Get(ctx, key).Result()
	if err != nil || got != val {
		t.Fatalf("GET %s on %s = %q, %v; want %q", key, addr, got, err, val)
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	rs := StartRedisN(t, 3)
	if len(rs) != 3 {
		t.Fatalf("StartRedisN returned %d servers, want 3", len(rs))
	}
	seen := map[string]bool{}
	for i, r := range rs {
		if want := fmt.Sprintf("127.0.0.1:%d", r.Port); r.Addr != want || seen[r.Addr] {
			t.Fatalf("server %d: Addr %q (Port %d) duplicate or inconsistent", i, r.Addr, r.Port)
		}
		seen[r.Addr] = true
		requireAlive(t, r.Addr, r.PID())
		redisSetGet(t, r.Addr, "k", fmt.Sprint("v", i))
	}
	// The masters are independent: each kept its own value.
	for i, r := range rs {
		got, err := newRedisClient(t, r.Addr, 2*time.Second).Get(context.Background(), "k").Result()
		if want := fmt.Sprint("v", i); err != nil || got != want {
			t.Errorf("server %d: GET k = %q, %v; want %q", i, got, err, want)
		}
	}

	t.Run("PauseResume", func(t *testing.T) {
		r := rs[0]
		r.Pause()
		if !isStopped(r.PID()) {
			t.Errorf("process %d not in state T after Pause", r.PID())
		}
		c := newRedisClient(t, r.Addr, 300*time.Millisecond)
		if err := c.Ping(context.Background()).Err(); err == nil {
			t.Errorf("PING to a paused server succeeded")
		}
		r.Resume()
		c = newRedisClient(t, r.Addr, 2*time.Second)
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Errorf("PING after Resume: %v", err)
		}
	})

	t.Run("KillRestart", func(t *testing.T) {
		r := rs[1]
		addr, pid := r.Addr, r.PID()
		r.Kill()
		requireGone(t, "after Kill", pid)
		requireRefused(t, addr)
		if got := r.PID(); got != 0 {
			t.Errorf("PID() after Kill = %d, want 0", got)
		}
		r.Kill() // idempotent
		r.Restart()
		if r.Addr != addr {
			t.Errorf("Addr after Restart = %q, want %q", r.Addr, addr)
		}
		requireAlive(t, "after Restart", r.PID())
		if r.PID() == pid {
			t.Errorf("PID unchanged after Kill+Restart")
		}
		redisSetGet(t, addr, "k2", "after-restart")
	})

	t.Run("StopWhilePaused", func(t *testing.T) {
		r := rs[2]
		addr, pid := r.Addr, r.PID()
		r.Pause()
		start := time.Now()
		r.Stop() // must SIGCONT first, else SIGTERM would wait for the 10 s SIGKILL fallback
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Stop of a paused server took %v", d)
		}
		requireGone(t, "after Stop", pid)
		requireRefused(t, addr)
		r.Stop() // idempotent
		r.Kill()
	})
}

// TestRedisCleanup proves that the t.Cleanup registered by StartRedis stops
// the server when the (sub)test that started it ends.
func TestRedisCleanup(t *testing.T) {
	t.Parallel()
	var pid int
	var addr string
	t.Run("start", func(t *testing.T) {
		r := StartRedis(t)
		pid, addr = r.PID(), r.Addr
		requireAlive(t, addr, pid)
		r.Pause() // cleanup must cope with a paused server too
	})
	requireGone(t, "after subtest", pid)
	requireRefused(t, addr)
}
