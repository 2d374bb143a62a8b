package peers

import (
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

func TestEtcdMutex(t *testing.T) {
	ec := testenv.StartEtcd(t, 1)
	open := func(t *testing.T) *EtcdMutex {
		t.Helper()
		l, err := NewEtcdMutex(EtcdMutexConfig{Endpoints: ec.Endpoints, SessionTTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}

	t.Run("Exclusion", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		// a twice: two acquisitions of one key through one Session must
		// not both hold it (the Mutex's shared-key trap).
		tokens := checkExclusion(t, []lock.Locker{a, a, b, c}, "x/y", 8, lock.AcquireOptions{TTL: 5 * time.Second})
		checkIncreasing(t, tokens)
		if len(tokens) > 0 && tokens[0] == 0 {
			t.Fatal("token 0: the create revision was not read")
		}
	})
	t.Run("EscapedKeys", func(t *testing.T) {
		// "a" and "a/b" are different locks: a waiter of one is not
		// counted by the other's mutex prefix.
		a, b := open(t), open(t)
		ctx := bg(t, 10*time.Second)
		l1, err := a.Acquire(ctx, "a/b", lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l2, err := b.TryAcquire(ctx, "a", lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("TryAcquire of a while a/b is held: %v", err)
		}
		for _, l := range []*lock.Lease{l1, l2} {
			if err := a.Release(ctx, l); err != nil && l == l1 {
				t.Fatal(err)
			}
		}
		b.Release(ctx, l2)
	})
	t.Run("TryAcquireHeld", func(t *testing.T) { checkTryHeld(t, open(t), open(t), "try") })
	t.Run("ReleaseTwice", func(t *testing.T) { checkReleaseTwice(t, open(t), "twice") })
	t.Run("Cancel", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		checkCancel(t, a, b, c, "cancel", waiters(a, "cancel", 1))
	})
	t.Run("FIFO", func(t *testing.T) { checkFIFO(t, open(t), open(t), open(t), "fifo") })
	t.Run("LeaseAndInspect", func(t *testing.T) {
		a := open(t)
		ctx := bg(t, 10*time.Second)
		lease, err := a.Acquire(ctx, "inspect", lock.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if lease.TTL() != 5*time.Second {
			t.Errorf("lease TTL %v, want the session's 5s", lease.TTL())
		}
		info, err := open(t).Inspect(ctx, "inspect")
		if err != nil {
			t.Fatal(err)
		}
		if info.Token != lease.Token || info.Waiters != 0 {
			t.Errorf("Inspect: %+v, want token %d and no waiters", info, lease.Token)
		}
		if err := a.Renew(ctx, lease, 0); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := a.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Inspect(ctx, "inspect"); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("Inspect after Release: %v, want ErrNotFound", err)
		}
	})
	t.Run("Closed", func(t *testing.T) { checkClosed(t, open(t), "closed") })
}
