package peers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
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

	t.Run("Exclusion", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		tokens := checkExclusion(t, []lock.Locker{a, a, b, c}, "excl", 8, lock.AcquireOptions{TTL: 5 * time.Second})
		for _, tok := range tokens {
			if tok != 0 {
				t.Fatalf("token %d: redsync has no fencing token, leases must carry 0", tok)
			}
		}
	})
	t.Run("TryAcquireHeld", func(t *testing.T) { checkTryHeld(t, open(t), open(t), "try") })
	t.Run("ReleaseTwice", func(t *testing.T) { checkReleaseTwice(t, open(t), "twice") })
	t.Run("Cancel", func(t *testing.T) { checkCancel(t, open(t), open(t), open(t), "cancel", nil) })
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
		rebuilt := lock.NewLease(lock.Grant{Key: lease.Key, Handle: lease.Handle, TTL: time.Second, Sent: time.Now()})
		if err := b.Release(ctx, rebuilt); err != nil {
			t.Fatalf("Release of the rebuilt lease through another Locker: %v", err)
		}
		if err := a.Renew(ctx, lease, 0); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Renew after the grant was released: %v, want ErrNotHeld", err)
		}
	})
	t.Run("Inspect", func(t *testing.T) {
		if _, err := open(t).Inspect(context.Background(), "k"); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Inspect: %v, want ErrUnsupported", err)
		}
	})
	t.Run("Closed", func(t *testing.T) { checkClosed(t, open(t), "closed") })
}
