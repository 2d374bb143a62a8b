package peers

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestRedsync(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	var addrs []string
	for _, r := range rs {
		addrs = append(addrs, r.Addr)
	}
	open := func(t *testing.T) *Redsync {
		t.Helper()
		// A short retry delay keeps the waits of the tests short; the
		// tries stay redsync's.
		l, err := NewRedsync(RedsyncConfig{Addrs: addrs, RetryDelay: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	checkPolling(t, "redsync", open)
	t.Run("RenewAndDeadline", func(t *testing.T) {
		a, b := open(t), open(t)
		ctx := bg(t, 10*time.Second)
		before := time.Now()
		lease, err := a.Acquire(ctx, "renew", lock.AcquireOptions{TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if d := lease.Deadline(); d.Before(before) || d.After(before.Add(2*time.Second)) {
			t.Fatalf("deadline %v is not within the TTL from the request", d.Sub(before))
		}
		if err := a.Renew(ctx, lease, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if lease.TTL() != 5*time.Second {
			t.Fatalf("TTL after Renew: %v", lease.TTL())
		}
		// A lease rebuilt from its fields releases the same grant.
		rebuilt := kit.NewLease(kit.Grant{Key: lease.Key, Handle: lease.Handle, TTL: time.Second, Sent: time.Now()})
		if err := b.Release(ctx, rebuilt); err != nil {
			t.Fatalf("Release of the rebuilt lease through another Locker: %v", err)
		}
		if err := a.Renew(ctx, lease, 0); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Renew after the grant was released: %v, want ErrNotHeld", err)
		}
	})
}
