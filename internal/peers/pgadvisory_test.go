package peers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

func TestPGAdvisory(t *testing.T) {
	pg := testenv.StartPostgres(t)
	open := func(t *testing.T) *PGAdvisory {
		t.Helper()
		l, err := NewPGAdvisory(context.Background(), PGAdvisoryConfig{URL: pg.URL, PoolSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	t.Run("Exclusion", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		checkExclusion(t, []lock.Locker{a, a, b, c}, "excl", 8, lock.AcquireOptions{TTL: 5 * time.Second})
	})
	t.Run("TryAcquireHeld", func(t *testing.T) { checkTryHeld(t, open(t), open(t), "try") })
	t.Run("ReleaseTwice", func(t *testing.T) { checkReleaseTwice(t, open(t), "twice") })
	t.Run("Cancel", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		checkCancel(t, a, b, c, "cancel", waiters(a, "cancel", 1))
		// The cancelled waiter's session left the queue: nobody waits.
		if info, err := a.Inspect(bg(t, 5*time.Second), "cancel"); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("Inspect after the last release: %+v, %v; want ErrNotFound", info, err)
		}
	})
	t.Run("CancelLeavesNoWaiter", func(t *testing.T) {
		// While the holder still holds, the cancelled waiter is gone from
		// the server's queue (the cancel request reached the server).
		a, b := open(t), open(t)
		ctx := bg(t, 20*time.Second)
		held, err := a.Acquire(ctx, "gone", lock.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := b.Acquire(wctx, "gone", lock.AcquireOptions{TTL: 10 * time.Second})
			got <- err
		}()
		eventually(t, 10*time.Second, "b is queued", waiters(a, "gone", 1))
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v", err)
		}
		eventually(t, 10*time.Second, "b's session leaves the queue", waiters(a, "gone", 0))
		if err := a.Release(ctx, held); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("FIFO", func(t *testing.T) { checkFIFO(t, open(t), open(t), open(t), "fifo") })
	t.Run("InspectRenew", func(t *testing.T) {
		a := open(t)
		ctx := bg(t, 10*time.Second)
		lease, err := a.Acquire(ctx, "inspect", lock.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		info, err := open(t).Inspect(ctx, "inspect")
		if err != nil {
			t.Fatal(err)
		}
		if info.Owner != a.ClientID() || info.Waiters != 0 || info.Token != 0 {
			t.Fatalf("Inspect: %+v, want owner %q, no waiters, token 0", info, a.ClientID())
		}
		if err := a.Renew(ctx, lease, 5*time.Second); err != nil || lease.TTL() != 5*time.Second {
			t.Fatalf("Renew: %v, TTL %v", err, lease.TTL())
		}
		if err := a.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("KeysWithNegativeIDs", func(t *testing.T) {
		// Keys whose FNV hash has the top bit set map to negative bigints;
		// Inspect and Renew must still find their locks.
		key := ""
		for i := 0; ; i++ {
			if key = "neg" + string(rune('a'+i%26)) + string(rune('a'+i/26)); advisoryID(key) < 0 {
				break
			}
		}
		a := open(t)
		ctx := bg(t, 10*time.Second)
		lease, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Inspect(ctx, key); err != nil {
			t.Fatalf("Inspect of %q (id %d): %v", key, advisoryID(key), err)
		}
		if err := a.Renew(ctx, lease, 0); err != nil {
			t.Fatalf("Renew of %q: %v", key, err)
		}
		if err := a.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Closed", func(t *testing.T) { checkClosed(t, open(t), "closed") })
}
