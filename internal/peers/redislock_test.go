package peers

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

func TestRedislock(t *testing.T) {
	rd := testenv.StartRedis(t)
	open := func(t *testing.T) *Redislock {
		t.Helper()
		// A short retry pause keeps the waits of the tests short.
		l, err := NewRedislock(RedislockConfig{Addr: rd.Addr, Retry: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	checkPolling(t, "redislock", open)
	t.Run("WaitPastObtainsTTL", func(t *testing.T) {
		// Obtain without a context deadline gives up after one TTL;
		// Acquire asks again until its own context ends.
		a, b := open(t), open(t)
		ctx := bg(t, 10*time.Second)
		held, err := a.Acquire(ctx, "long", lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := b.Acquire(context.Background(), "long", lock.AcquireOptions{TTL: 100 * time.Millisecond, AutoRenew: true})
			if err == nil {
				err = b.Release(ctx, l)
			}
			got <- err
		}()
		// Let b's Obtain run out its 100 ms budget a few times: time that
		// must pass, not a wait for an event.
		time.Sleep(500 * time.Millisecond)
		if err := a.Release(ctx, held); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("Acquire after waiting past Obtain's TTL budget: %v", err)
		}
	})
	t.Run("Renew", func(t *testing.T) {
		a := open(t)
		ctx := bg(t, 10*time.Second)
		lease, err := a.Acquire(ctx, "renew", lock.AcquireOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Renew(ctx, lease, 5*time.Second); err != nil || lease.TTL() != 5*time.Second {
			t.Fatalf("Renew: %v, TTL %v", err, lease.TTL())
		}
		if err := a.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	})
}
