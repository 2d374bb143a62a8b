package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/testenv"
)

func addrs(rs []*testenv.Redis) []string {
	var a []string
	for _, r := range rs {
		a = append(a, r.Addr)
	}
	return a
}

// newLocker returns a Locker over rs, closed when t ends.
func newLocker(t testing.TB, rs []*testenv.Redis, edit func(*Config)) *Locker {
	t.Helper()
	cfg := DefaultConfig(addrs(rs)...)
	if edit != nil {
		edit(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// raw returns a plain client of r, closed when t ends.
func raw(t testing.TB, r *testenv.Redis) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// holders counts the nodes that have the lock key of key.
func holders(t testing.TB, rs []*testenv.Redis, key string) int {
	t.Helper()
	n := 0
	for _, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := raw(t, r).Exists(ctx, DefaultPrefix+":lock:{"+key+"}").Result()
		cancel()
		if err != nil {
			t.Fatalf("EXISTS on %s: %v", r.Addr, err)
		}
		n += int(v)
	}
	return n
}

// awaitHolders waits until want nodes hold key. A release (or an abort)
// returns once a quorum has answered; the other nodes' answers come a
// moment later, so a count right after it would race with them.
func awaitHolders(t testing.TB, rs []*testenv.Redis, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n := holders(t, rs, key); n != want; n = holders(t, rs, key) {
		if time.Now().After(deadline) {
			t.Errorf("%d nodes hold %q after 10 s, want %d", n, key, want)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func bg(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}
